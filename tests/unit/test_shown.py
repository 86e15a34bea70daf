"""core/fmt.shown and whole: text from others as a terminal and UTF-8 may take it."""

from __future__ import annotations

import unicodedata

from swarm_tui.core.fmt import shown


def test_the_users_text_is_left_as_it_is():
    for text in ("문서 요약 작업 #42", "总结这份文件", "job[/x] — ok · 99.4%", "日本語\u3000全角"):
        assert shown(text) == text and shown(text, lines=True) == text


def test_every_control_a_terminal_acts_on_becomes_visible():
    assert shown("t\x1b[2Jx") == "t␛[2Jx"
    assert shown("\x1b]0;title\x07") == "␛]0;title␇"
    assert shown("a\rb\bc\x7f") == "a␍b␈c␡"
    assert shown("\x9b2J") == "\ufffd2J"  # CSI on 8-bit terminals
    assert shown("x\u202ey\u2066z") == "x\ufffdy\ufffdz"  # bidi override, isolate
    everything = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))
    assert all(unicodedata.category(c) != "Cc" for c in shown(everything))


def test_lines_keep_newlines_and_tabs_and_fold_crlf():
    assert shown("a\r\nb\tc\n\x1b[1m", lines=True) == "a\nb\tc\n␛[1m"
    assert shown("a\nb") == "a␊b"  # a one-line field shows a newline, never breaks


def test_whole_joins_pairs_and_replaces_lone_halves():
    from swarm_tui.core.fmt import whole

    assert whole("plain") == "plain" and whole("요약 😀") == "요약 😀"
    assert whole("a \ud83d\ude00 b") == "a \U0001f600 b"  # two halves, as two chunks leave
    assert whole("x \ud83d y \udc00") == "x \ufffd y \ufffd"
    assert whole("x \ud83d").encode() == "x \ufffd".encode()

"""Event-log lines at 80 columns keep what on-call reads them for (issue 36)."""

from __future__ import annotations

import pytest

from swarm_tui.ui.log_fit import fit_line

RETRY_OTHER = "    0.4s RETRY  demo-00168 #1 rate_limited 429 on sk-…9f12#7728d7: other key +0.00s"
RETRY_WAIT = "    0.4s RETRY  demo-00168 #1 server 503 +4.00s"
QUOTA = ("   12.0s CTRL   sim key sk-…9f12#7728d7 deepseek-v3.2: quota spent: next call in "
         "8.0 s (~6000/min)")
TOKENS = ("   12.0s CTRL   sim key sk-…9f12#7728d7 deepseek-v3.2: token quota spent: next call "
          "in 0.7 s (~96,000 tokens/min)")
STORM = ("   12.0s CTRL   sim key sk-…9f12#7728d7 deepseek-v3.2: 429 storm: cooling 4.0 s, "
         "then ≤ 2.0 calls/s")
FAIL = ("    1.3s FAIL   demo-00044 auth 401 Incorrect API key provided: check the key file "
        "and the gateway's logs")


@pytest.mark.parametrize(("line", "kept"), [
    (RETRY_OTHER, ["RETRY", "demo-00168", "#1", "rate_limited", "#7728d7", "other"]),
    (RETRY_WAIT, ["RETRY", "demo-00168", "server 503", "+4.00s"]),
    (QUOTA, ["CTRL", "#7728d7", "deepseek", "8.0 s"]),
    (STORM, ["CTRL", "#7728d7", "storm", "4.0 s"]),
    (TOKENS, ["CTRL", "#7728d7", "deepseek", "tokens", "0.7 s"]),
    (FAIL, ["FAIL", "demo-00044", "auth 401"]),
])
def test_a_line_fits_the_80_column_log_and_keeps_its_key_and_wait(line, kept):
    fitted = fit_line(line, 52)  # the log panel's width in an 80-column terminal
    assert len(fitted) <= 52
    for part in kept:
        assert part in fitted, (part, fitted)


def test_a_cut_is_marked_and_a_line_that_fits_is_untouched():
    assert fit_line(FAIL, 52).endswith("…")
    assert fit_line(RETRY_WAIT, 200) == RETRY_WAIT
    assert fit_line("no time here, only words " * 4, 20) == "no time here, only …"
    for width in range(1, 60):  # never longer than asked, whatever the width
        assert len(fit_line(QUOTA, width)) <= width


def test_every_line_of_a_narrow_log_keeps_its_tag_in_the_same_column():
    """Fitted or not, a line's tag starts in the same column as its neighbours' whose
    times have as many digits (a fitted line had lost its time's padding alone and stood
    4 cells left of the others)."""
    lines = [line.replace("    0.4s", "   10.4s").replace("    1.3s", "   11.3s")
             for line in (RETRY_OTHER, RETRY_WAIT, QUOTA, STORM, FAIL)]
    lines += ["   17.5s RETRY  demo-01666 #2 +0.34s", "   99.9s DONE   demo-00001 ok"]
    for width in (40, 52, 63):
        fitted = [fit_line(line, width) for line in lines]
        assert all(len(f) <= width for f in fitted)
        assert {f.index(" ") for f in fitted} == {5}, fitted  # "12.0s": no padding
        assert {f[6:13] for f in fitted} <= {"RETRY  ", "CTRL   ", "FAIL   ", "DONE   "}, fitted
    assert [fit_line(line, 120) for line in lines] == lines  # wide: as written


def test_a_replayed_retry_line_is_written_as_the_live_one():
    """Replay rebuilds a retry's line from its stored call; a timeout has no status, and
    the live line (engine/snapshot.py) has no gap for it."""
    from swarm_tui.replay.timeline import call_line

    assert (call_line("demo-00003", 2, "timeout", None, 0.5, None)
            == "RETRY  demo-00003 #2 timeout +0.50s")
    assert (call_line("demo-00168", 1, "server", 503, 4.0, "busy")
            == "RETRY  demo-00168 #1 server 503 +4.00s")

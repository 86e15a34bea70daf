"""The script-aware estimate counts each class in fewer scans (token_count.py); its figure
must stay the one the weights were fitted with: the plain six-scan form, kept here."""

from __future__ import annotations

import random
from pathlib import Path

from swarm_tui import token_count
from swarm_tui.token_count import estimate_tokens

CORPORA = Path(__file__).resolve().parents[2] / "bench" / "corpora"
# every class the table has: letters, digits, punctuation, each kind of white space (runs of
# them: the double-space count), Hangul, Han, kana, Latin accents, Cyrillic, emoji
ALPHABET = ("abcXYZ" "0189" ".,;:!?-_()[]{}'\"" " " * 6 + "\t\r\x0b\x0c\x1c\x1f" + "\n" * 3
            + "한국어요청" + "中文模型请求" + "カタカナひらがな" + "éüñ" + "Жд" + "🙂🚀" + "\u3000")


def _six_scans(text: str) -> int:
    w = token_count._W
    c = text.encode().translate(token_count._TABLE, token_count._CONTINUATION)
    spaces, doubles = c.count(b" "), c.count(b"  ")
    n = (w[0] * c.count(b"a") + w[1] * (spaces - 2 * doubles) + w[2] * doubles
         + w[3] * c.count(b"p") + w[4] * c.count(b"d") + w[5] * c.count(b"\n"))
    if len(c) != len(text) or not text.isascii():
        n += (w[6] * c.count(b"K") + w[7] * c.count(b"H") + w[8] * c.count(b"J")
              + w[9] * c.count(b"o"))
    return max(1, round(n))


def test_the_estimate_equals_the_six_scan_form_on_every_corpus_and_on_random_text():
    texts = [p.read_text(encoding="utf-8") for p in sorted(CORPORA.iterdir()) if p.is_file()]
    assert len(texts) >= 4
    rng = random.Random(34)
    for _ in range(3000):
        texts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 400))))
    texts += ["", " ", "  ", "   ", "a  b", "\t \t", "a\n\nb", "한 국", "中  文"]
    for text in texts:
        assert estimate_tokens(text) == _six_scans(text), text[:80]
    # and the corpora's counts are no constant: the estimate moves with the text
    assert len({estimate_tokens(t) for t in texts[:8]}) > 1

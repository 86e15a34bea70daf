"""How many tokens a text is: the model family's own tokenizer when the config names one
(`[tokenizers]`), else an estimate that knows scripts.

Characters / 4 was 68 % low on Chinese and Japanese, 45 % low on Korean and 17 % high on
short English against o200k_base: routing by length kept 99 of 100 long Chinese prompts on
the short-context model. The estimate counts UTF-8 lead bytes by script (two translates and
ten counts, all in C: ~25 µs for a 4 KB prompt here) and weighs them by least squares
against o200k_base over bench/corpora; `python bench/tokens.py` prints its error per
corpus (held-out halves within ±7 %).

A tokenizer is loaded from a local file only — a Hugging Face `tokenizer.json`, a
`.tiktoken` BPE file, or `tiktoken:NAME` already in tiktoken's cache — never fetched: a
bastion is offline, and a run must not wait on a download.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from swarm_tui.errors import UserError

Counter = Callable[[str], int]


def _class_table() -> bytes:
    t = bytearray(256)
    for i in range(256):
        c = chr(i)
        if i < 0x80:
            t[i] = ord("a" if c.isalpha() else "d" if c.isdigit() else "\n" if c == "\n"
                       else " " if c.isspace() else "p")
        elif 0xEA <= i <= 0xED:
            t[i] = ord("K")  # U+A000–DFFF: Hangul syllables (and rare Yi)
        elif 0xE4 <= i <= 0xE9:
            t[i] = ord("H")  # U+4000–9FFF: CJK ideographs
        elif i == 0xE3:
            t[i] = ord("J")  # U+3000–3FFF: kana, CJK punctuation, extension A
        else:
            t[i] = ord("o")  # any other lead byte (accents, Cyrillic, emoji, fullwidth)
    return bytes(t)


_TABLE = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))  # dropped: one class byte per character
# tokens per letter, word gap, double space, punctuation, digit, line break, Hangul, Han,
# kana block, other non-ASCII — fitted to o200k_base (bench/tokens.py)
_W = (0.066, 0.86, 0.235, 0.68, 0.66, 1.37, 0.54, 0.88, 0.76, 0.32)


def estimate_tokens(text: str) -> int:
    """o200k-like tokens of a text in any script, without a tokenizer."""
    c = text.encode().translate(_TABLE, _CONTINUATION)  # one class byte per character
    # Each count is a scan of its own: letters, ~80 % of a prompt, are taken out once and
    # counted by length, the other classes counted in what is left (the hot path estimates
    # every task's prompt: 6 scans of a 4 KB prompt were ~40 µs here, this ~25 µs). Double
    # spaces are counted before, where letters still separate them.
    doubles = c.count(b"  ")
    rest = c.translate(None, b"a")
    spaces = rest.count(b" ")
    n = (_W[0] * (len(c) - len(rest)) + _W[1] * (spaces - 2 * doubles) + _W[2] * doubles
         + _W[3] * rest.count(b"p") + _W[4] * rest.count(b"d") + _W[5] * rest.count(b"\n"))
    if len(c) != len(text) or not text.isascii():
        n += (_W[6] * rest.count(b"K") + _W[7] * rest.count(b"H") + _W[8] * rest.count(b"J")
              + _W[9] * rest.count(b"o"))
    return max(1, round(n))


def load_tokenizer(spec: str, place: str, base_dir: Path | None = None) -> Counter:
    """A counter from `tiktoken:NAME`, a `.tiktoken` file or a `tokenizer.json`."""
    if spec.startswith("tiktoken:"):
        return _tiktoken_cached(spec.removeprefix("tiktoken:"), place)
    path = Path(spec).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise UserError(f"{place}: {path}: no such tokenizer file (swarm-tui reads "
                        "tokenizers from local files only)")
    if path.suffix == ".json":
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise UserError(f"{place}: a tokenizer.json needs the 'tokenizers' package: "
                            "pip install 'swarm-tui[tokenizers]'") from None
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the library raises its own Exception type on bad files
            raise UserError(f"{place}: {path}: not a tokenizer.json ({e})") from None
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    return _tiktoken_file(path, place)


def _tiktoken_module(place: str) -> Any:
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        raise UserError(f"{place}: tiktoken encodings need the 'tiktoken' package: "
                        "pip install 'swarm-tui[tokenizers]'") from None
    return tiktoken


def _tiktoken_cached(name: str, place: str) -> Counter:
    tiktoken = _tiktoken_module(place)
    real = tiktoken.load.read_file

    def offline(blobpath: str) -> bytes:
        # read_file is tiktoken's fetch on a cache miss: refuse it
        if blobpath.startswith(("http://", "https://")):
            raise _NotCached
        return real(blobpath)

    tiktoken.load.read_file = offline
    try:
        enc = tiktoken.get_encoding(name)
    except _NotCached:
        cache = os.environ.get("TIKTOKEN_CACHE_DIR") or "tiktoken's cache"
        raise UserError(f"{place}: tiktoken:{name}: not in {cache} (set "
                        "TIKTOKEN_CACHE_DIR, or give the .tiktoken file's path; swarm-tui "
                        "never downloads one)") from None
    except ValueError as e:
        raise UserError(f"{place}: tiktoken:{name}: {e}") from None
    finally:
        tiktoken.load.read_file = real
    return lambda text: len(enc.encode(text, disallowed_special=()))


class _NotCached(Exception):
    pass


def _tiktoken_file(path: Path, place: str) -> Counter:
    """A `.tiktoken` BPE file, split as the encoding its name says (o200k_base otherwise):
    the pattern and special tokens come from tiktoken's own constructor."""
    tiktoken = _tiktoken_module(place)
    from tiktoken_ext import openai_public

    try:
        ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    except Exception as e:  # base64/format errors surface as several exception types
        raise UserError(f"{place}: {path}: not a .tiktoken BPE file ({e})") from None
    name = next((n for n in ("cl100k_base", "p50k_base", "r50k_base", "o200k_base")
                 if n in path.name), "o200k_base")
    real = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks
    try:
        params = getattr(openai_public, name)()
    finally:
        openai_public.load_tiktoken_bpe = real
    enc = tiktoken.Encoding(path.stem, pat_str=params["pat_str"], mergeable_ranks=ranks,
                            special_tokens=params["special_tokens"])
    return lambda text: len(enc.encode(text, disallowed_special=()))


class TokenCounts:
    """The config's `[tokenizers]`: model glob -> counter; the estimate for any other."""

    def __init__(self, counters: Mapping[str, Counter] | None = None,
                 routing_model: str | None = None) -> None:
        self._globs = dict(counters or {})
        self._by_model: dict[str, Counter] = {}
        self.routing_model = routing_model  # whose count decides long vs short context

    @classmethod
    def load(cls, specs: Mapping[str, str], place: str, base_dir: Path | None,
             routing_model: str | None) -> TokenCounts:
        return cls({glob: load_tokenizer(spec, f"{place}: tokenizers.{glob}", base_dir)
                    for glob, spec in specs.items()}, routing_model)

    def for_model(self, model: str | None) -> Counter:
        model = model or self.routing_model
        if model is None or not self._globs:
            return estimate_tokens
        found = self._by_model.get(model)
        if found is None:
            found = next((c for g, c in self._globs.items() if fnmatch.fnmatchcase(model, g)),
                         estimate_tokens)
            self._by_model[model] = found
        return found

    def exact(self, model: str | None) -> bool:
        return self.for_model(model) is not estimate_tokens


_counts = TokenCounts()


def configure(counts: TokenCounts) -> None:
    """This process's counts (set once the config is loaded; before, the estimate)."""
    global _counts
    _counts = counts


def counts() -> TokenCounts:
    return _counts

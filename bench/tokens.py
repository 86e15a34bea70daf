"""Token counts against real tokenizers: the script-aware estimate (no tokenizer at hand)
and a configured tokenizer, per corpus, against tiktoken's o200k_base.

    python bench/tokens.py [--o200k PATH] [--hf PATH/tokenizer.json] [--write-reference]

Corpora: bench/corpora/*.txt, one JSON string (a prompt) a line; sources and licences
in bench/corpora/README.md. o200k_base is read from TIKTOKEN_CACHE_DIR or from `--o200k`
(the .tiktoken file; LiteLLM's wheel carries it as
litellm/litellm_core_utils/tokenizers/fb374d41…) — never downloaded. `--hf` adds a
column for another family's tokenizer.json (e.g. DeepSeek's, also in LiteLLM's
wheel). `--write-reference` records the o200k totals the suite checks the estimate
against (bench/corpora/o200k_counts.json).

Printed per corpus: prompts, o200k tokens, the error of chars/4 (the old estimate), of the
script-aware estimate, of a configured o200k tokenizer; the estimate's per-prompt p50/p90
error; and its speed against chars/4 (µs per 3 KB prompt, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swarm_tui.errors import UserError  # noqa: E402
from swarm_tui.token_count import estimate_tokens, load_tokenizer  # noqa: E402

CORPORA = ROOT / "bench" / "corpora"


NAMES = ("en", "en-docs", "code", "zh", "ko", "ja")


def corpora() -> dict[str, list[str]]:
    return {n: [json.loads(line) for line in (CORPORA / f"{n}.txt").open(encoding="utf-8")]
            for n in NAMES}


def _cache_with(path: Path) -> str:
    """A tiktoken cache directory holding this file under the name tiktoken looks for."""
    import hashlib
    import tempfile

    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    d = Path(tempfile.mkdtemp(prefix="tiktoken-cache-"))
    (d / hashlib.sha1(url.encode()).hexdigest()).write_bytes(path.read_bytes())
    return str(d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--o200k", help="path to o200k_base.tiktoken (else tiktoken's cache)")
    ap.add_argument("--hf", help="a tokenizer.json for one more column")
    ap.add_argument("--write-reference", action="store_true")
    args = ap.parse_args()
    import tiktoken  # the reference, straight from tiktoken (its cache, never fetched)

    if args.o200k:
        os.environ["TIKTOKEN_CACHE_DIR"] = _cache_with(Path(args.o200k))
    try:
        # the product's own loader, as `[tokenizers]` would use it: the .tiktoken file's
        # path, or tiktoken's cache only — first, so that tiktoken's own call below finds
        # the file in its cache instead of fetching it (offline: a traceback)
        configured = load_tokenizer(args.o200k or "tiktoken:o200k_base", "bench")
        hf = load_tokenizer(args.hf, "bench") if args.hf else None
    except UserError as e:
        sys.exit(f"bench/tokens.py: {e} (--o200k PATH names the .tiktoken file)")
    reference_enc = tiktoken.get_encoding("o200k_base")

    def o200k(text: str) -> int:
        return len(reference_enc.encode(text, disallowed_special=()))

    data = corpora()
    print(f"{'corpus':8} {'prompts':>7} {'o200k':>7} {'chars/4':>8} {'estimate':>9} "
          f"{'p50':>6} {'p90':>6} {'tokenizer':>9}" + (f" {'hf':>7} {'est/hf':>7}" if hf else ""))
    reference = {}
    for name, prompts in data.items():
        truth = [o200k(p) for p in prompts]
        est = [estimate_tokens(p) for p in prompts]
        quarter = sum(-(-len(p) // 4) for p in prompts)
        total = sum(truth)
        reference[name] = total
        mine = sum(configured(p) for p in prompts)
        errs = sorted(abs(e / max(1, t) - 1) for e, t in zip(est, truth, strict=True))
        row = (f"{name:8} {len(prompts):7} {total:7} {quarter / total - 1:+8.1%} "
               f"{sum(est) / total - 1:+9.1%} {errs[len(errs) // 2]:6.1%} "
               f"{errs[int(len(errs) * 0.9)]:6.1%} {mine / total - 1:+9.1%}")
        if hf:
            h = sum(hf(p) for p in prompts)
            row += f" {h:7} {sum(est) / h - 1:+7.1%}"
        print(row)
    sample = " ".join(data["en"])[:3000]
    zh = "".join(data["zh"])[:1000]  # 1,000 characters: ~3 KB of UTF-8
    n = 2000
    for label, text in (("English", sample), ("Chinese", zh)):
        quarter_us = timeit.timeit(lambda t=text: -(-len(t) // 4), number=n) / n * 1e6
        est_us = timeit.timeit(lambda t=text: estimate_tokens(t), number=n) / n * 1e6
        tok_us = timeit.timeit(lambda t=text: o200k(t), number=n // 10) / (n // 10) * 1e6
        print(f"speed, {label} 3 KB prompt: chars/4 {quarter_us:.2f} µs, estimate "
              f"{est_us:.1f} µs, o200k tokenizer {tok_us:.0f} µs (estimate "
              f"{tok_us / est_us:.1f}x faster than the tokenizer)")
    if args.write_reference:
        out = CORPORA / "o200k_counts.json"
        out.write_text(json.dumps({"tokenizer": "tiktoken o200k_base", "totals": reference},
                                  indent=1) + "\n")
        print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())

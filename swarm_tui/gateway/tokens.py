"""Token estimates for calls whose gateway reported no usage.

Each text is counted by the model's tokenizer when the config names one, else by the
script-aware estimate (swarm_tui/token_count.py). A text's count alone ran 41 % low on
input against a real llama.cpp server (212 vs 358 tokens): the chat template wraps
every message in role markers and separators. So the estimate adds a per-message
overhead and, once the gateway has reported usage for a model in this run, scales to
what it reported (reported / raw estimate, over every call with usage). Estimates stay
marked `estimated` either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swarm_tui.token_count import counts

MESSAGE_OVERHEAD = 4  # role + separators per chat message (OpenAI-style templates: 3–4)
REPLY_PRIMING = 3     # the assistant turn's opening the template adds
# the calibration learns from every reported call at first, then from one in LEARN_EVERY:
# counting each prompt and answer again was ~0.06 ms of the hot path's ~0.5 ms per call,
# and a ratio over thousands of calls moves no more for it
LEARN_ALL = 64
LEARN_EVERY = 16


def raw_prompt_tokens(messages: Sequence[dict[str, Any]], model: str | None = None) -> int:
    count = counts().for_model(model)
    return (sum(count(str(m.get("content") or "")) for m in messages)
            + MESSAGE_OVERHEAD * len(messages) + REPLY_PRIMING)


def raw_completion_tokens(text: str, model: str | None = None) -> int:
    return counts().for_model(model)(text) if text else 0


class TokenEstimator:
    """Per model: the sums of reported and raw-estimated tokens, input and output."""

    def __init__(self) -> None:
        self._seen: dict[str, list[int]] = {}  # model -> [rep_in, raw_in, rep_out, raw_out]
        self._calls: dict[str, int] = {}  # model -> reported calls seen

    def learn(self, model: str, messages: Sequence[dict[str, Any]], text: str,
              tokens_in: int, tokens_out: int) -> None:
        """A call the gateway reported usage for."""
        n = self._calls[model] = self._calls.get(model, 0) + 1
        if n > LEARN_ALL and n % LEARN_EVERY:
            return
        acc = self._seen.setdefault(model, [0, 0, 0, 0])
        if tokens_in:
            acc[0] += tokens_in
            acc[1] += raw_prompt_tokens(messages, model)
        if tokens_out and text:
            acc[2] += tokens_out
            acc[3] += raw_completion_tokens(text, model)

    def estimate(self, model: str, messages: Sequence[dict[str, Any]], text: str
                 ) -> tuple[int, int]:
        """(input, output) tokens for a call with no reported usage."""
        t_in, t_out = raw_prompt_tokens(messages, model), raw_completion_tokens(text, model)
        acc = self._seen.get(model)
        if acc is not None:
            if acc[1]:
                t_in = round(t_in * acc[0] / acc[1])
            if acc[3]:
                t_out = round(t_out * acc[2] / acc[3])
        return t_in, t_out

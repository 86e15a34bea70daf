"""Workload: tasks from a JSON Lines file, or the built-in demo swarm."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from swarm_tui.core.records import TaskHead
from swarm_tui.errors import UserError
from swarm_tui.token_count import counts, estimate_tokens

# the chat template's tokens around each message (role markers, separators; 3–4 in the
# OpenAI and Qwen/Kimi templates) and around the call (the assistant's header)
TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_PER_CALL = 16


class Task(BaseModel):
    """One line of a workload file (DESIGN.md contract)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(min_length=1, max_length=200)]
    prompt: Annotated[str, Field(min_length=1)]
    system: str | None = None
    user_id: str | None = None
    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("id", "user_id", mode="before")
    @classmethod
    def _not_number(cls, v: object) -> object:
        if v is not None and not isinstance(v, str):
            raise ValueError("must be a string")
        return v

    @property
    def routing_user(self) -> str:
        return self.user_id if self.user_id is not None else self.id

    def messages(self) -> list[dict[str, str]]:
        """The chat messages of a call, built at each send (not held for a queued task:
        ~0.5 KB each at 100,000 tasks)."""
        if self.system:
            return [{"role": "system", "content": self.system},
                    {"role": "user", "content": self.prompt}]
        return [{"role": "user", "content": self.prompt}]

    def prompt_tokens_estimate(self) -> int:
        """The count routing by length uses: the tokenizer of the task's model (or of the
        short-context model the rule guards), else the script-aware estimate."""
        count = counts().for_model(self.model)
        return count(self.prompt) + (count(self.system) if self.system else 0)

    def prompt_tokens_bound(self) -> int:
        """At least as many tokens as the prompt can be, in any script: a byte-level BPE
        token covers at least one UTF-8 byte, plus each message's chat-template tokens.
        (A budget ceiling built on an estimate passed its cap 4x on Chinese prompts.)"""
        n = len(self.prompt.encode()) + TEMPLATE_TOKENS_PER_MESSAGE
        if self.system:
            n += len(self.system.encode()) + TEMPLATE_TOKENS_PER_MESSAGE
        return n + TEMPLATE_TOKENS_PER_CALL

    def head(self) -> TaskHead:
        return TaskHead(self.id, self.user_id, self.model, self.max_tokens,
                        self.prompt_tokens_estimate(), self.prompt_tokens_bound())


@dataclass(frozen=True, slots=True)
class BadLine:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def _reason(e: ValidationError) -> str:
    first = e.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "line"
    msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return f"{key}: {msg}"


def scan_workload(path: Path) -> Iterator[Task | BadLine]:
    """Each line's task, or why it is bad (file:line: reason), in file order; a duplicate
    id is a bad line. Holds nothing but the ids seen."""
    try:
        fh = path.open("r", encoding="utf-8-sig")  # a BOM (Windows editors) is not data
    except FileNotFoundError:
        raise UserError(f"workload {path}: file not found") from None
    except (IsADirectoryError, PermissionError) as e:
        raise UserError(f"workload {path}: cannot read: {e.strerror}") from None
    seen: dict[str, int] = {}
    with fh:
        try:
            for n, raw in enumerate(fh, start=1):
                line = raw.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    yield BadLine(str(path), n, f"invalid JSON: {e.msg} (column {e.colno})")
                    continue
                except RecursionError:
                    yield BadLine(str(path), n, "invalid JSON: nested too deeply")
                    continue
                if not isinstance(obj, dict):
                    yield BadLine(str(path), n, "expected a JSON object")
                    continue
                try:
                    task = Task.model_validate(obj)
                except RecursionError:
                    yield BadLine(str(path), n, "metadata: nested too deeply")
                    continue
                except ValidationError as e:
                    yield BadLine(str(path), n, _reason(e))
                    continue
                if task.id in seen:
                    yield BadLine(str(path), n, f"id: duplicate of line {seen[task.id]}")
                    continue
                seen[task.id] = n
                yield task
        except UnicodeDecodeError:
            raise UserError(f"workload {path}: not UTF-8 text") from None


def parse_workload(path: Path) -> tuple[list[Task], list[BadLine]]:
    """Parse every line; return the good tasks and every bad line (file:line: reason)."""
    tasks: list[Task] = []
    bad: list[BadLine] = []
    for item in scan_workload(path):
        (bad if isinstance(item, BadLine) else tasks).append(item)  # type: ignore[arg-type]
    return tasks, bad


class Workload:
    """A run's tasks, never held whole: their heads (for the engine) from one pass, and a
    new pass over the source whenever the whole tasks are needed (the store's rows).

    A 100,000-line workload of ~3 KB prompts is ~420 MB as Task objects; as heads ~20 MB."""

    def __init__(self, heads: list[TaskHead], reread: Callable[[], Iterator[Task]],
                 bad: Sequence[BadLine] = ()) -> None:
        self.heads = heads
        self.bad = list(bad)
        self._reread = reread

    def __len__(self) -> int:
        return len(self.heads)

    def __iter__(self) -> Iterator[Task]:
        """The good tasks again, in the order of `heads`."""
        return self._reread()

    @classmethod
    def of(cls, tasks: Sequence[Task]) -> Workload:
        """Tasks already in memory (tests, small swarms)."""
        return cls([t.head() for t in tasks], lambda: iter(tasks))

    @classmethod
    def stored(cls, heads: list[TaskHead]) -> Workload:
        """A resumed run's tasks: its rows exist, each prompt is read from them at its send."""
        def reread() -> Iterator[Task]:
            raise RuntimeError("a resumed run's tasks are read from its store")
        return cls(heads, reread)

    @classmethod
    def from_file(cls, path: Path) -> Workload:
        heads: list[TaskHead] = []
        bad: list[BadLine] = []
        for item in scan_workload(path):
            if isinstance(item, BadLine):
                bad.append(item)
            else:
                heads.append(item.head())

        def reread() -> Iterator[Task]:
            for item in scan_workload(path):
                if isinstance(item, Task):
                    yield item
        return cls(heads, reread, bad)

    @classmethod
    def demo(cls, n: int, seed: int = 7) -> Workload:
        return cls([t.head() for t in iter_demo(n, seed)], lambda: iter_demo(n, seed))


_WORDS = (
    "summarise review clean the quarterly report contract clause invoice table code diff "
    "customer ticket schema migration latency budget gateway canary token cost"
).split()


def demo_tasks(n: int, seed: int = 7, max_tokens: int = 1200) -> list[Task]:
    return list(iter_demo(n, seed, max_tokens))


# One task in a thousand carries a document the demo's long-context model chokes on (the
# simulator breaks its stream every time with --sim-incidents): it retries, then falls back.
DEMO_POISON = "[scan: pages out of order]"


def iter_demo(n: int, seed: int = 7, max_tokens: int = 1200) -> Iterator[Task]:
    """The team's shape: prompts of ~720 tokens on average, up to 1,200 output tokens.

    About one task in seven carries a long document (1,000-1,500 tokens) so the
    default dual-model routing sends it to the long-context model.
    """
    poisoned = n // 3
    rng = random.Random(seed)
    corpus = " ".join(rng.choice(_WORDS) for _ in range(4000))  # sliced per task: cheap
    chars_per_token = len(corpus) / estimate_tokens(corpus)  # sized as routing counts it
    for i in range(n):
        long_doc = rng.random() < 0.15 or i % 1000 == poisoned % 1000
        tokens = rng.randint(1000, 1500) if long_doc else rng.randint(450, 850)
        start = rng.randrange(len(corpus) // 2)
        start = corpus.find(" ", start) + 1  # at a word: "Task 0: ummarise" read as a typo
        size = round(tokens * chars_per_token)
        body = (corpus[start:] + " " + corpus)[:size]
        # user ids spread over the hash space so canary buckets are realistic
        uid = "user-" + hashlib.sha256(f"{seed}:{i % max(1, n // 3)}".encode()).hexdigest()[:10]
        head = f"Task {i} {DEMO_POISON}: " if i % 1000 == poisoned % 1000 else f"Task {i}: "
        yield Task(
            id=f"demo-{i:05d}",
            prompt=(head + body)[:size],
            system="You are a careful sub-agent. Answer concisely.",
            user_id=uid,
            max_tokens=max_tokens,
        )

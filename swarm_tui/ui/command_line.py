"""The `:` command line, as k9s has it: `:runs`, `:keys`, `:canary`, `:cost`, `:replay ID`,
`:theme NAME`, `:q` — each the same action as its key, parsed here (pure: no app)."""

from __future__ import annotations

from dataclasses import dataclass

# command -> (app action, what it does); aliases point at the same action
COMMANDS: dict[str, tuple[str, str]] = {
    "runs": ("history", "stored runs: replay, compare"),
    "history": ("history", "stored runs (same as :runs)"),
    "keys": ("keys", "API keys: state, add / retire / enable"),
    "canary": ("canary", "canary: stages, gates, promote / abort"),
    "cost": ("cost", "cost: totals, projections, what-if"),
    "replay": ("replay", "replay a stored run: :replay RUN_ID"),
    "theme": ("theme", "switch theme: :theme NAME"),
    "filter": ("filter_to", "filter the grid: :filter state:failed"),
    "agents": ("view_agents", "the agents view (one per slot)"),
    "tasks": ("view_tasks", "the tasks view (every task)"),
    "demo": ("demo", "start the demo swarm"),
    "help": ("help", "the key bindings"),
    "q": ("request_quit", "quit (asks while a run is active)"),
    "quit": ("request_quit", "quit (same as :q)"),
}
NEEDS_ARG = {"replay", "theme", "filter"}


@dataclass(frozen=True)
class Parsed:
    action: str           # an app action name (action_<name>)
    arg: str | None = None


class CommandError(ValueError):
    pass


def parse(line: str) -> Parsed:
    """`:runs`, `runs`, `:replay 2026…`, `:theme swarm-ansi`; a unique prefix works
    (`:ca` is canary), as k9s completes."""
    text = line.strip().removeprefix(":").strip()
    if not text:
        raise CommandError("empty command (try :runs, :keys, :canary, :cost, :q)")
    word, _, rest = text.partition(" ")
    word, rest = word.lower(), rest.strip()
    name = word if word in COMMANDS else _unique_prefix(word)
    action = COMMANDS[name][0]
    if name in NEEDS_ARG and not rest:
        raise CommandError(f":{name} needs an argument ({COMMANDS[name][1]})")
    if name not in NEEDS_ARG and rest:
        raise CommandError(f":{name} takes no argument")
    return Parsed(action, rest or None)


def _unique_prefix(word: str) -> str:
    found = sorted({c for c in COMMANDS if c.startswith(word)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise CommandError(f"unknown command :{word} (known: {', '.join(COMMANDS)})")
    raise CommandError(f":{word} could be {', '.join(':' + f for f in found)}")


def completions(themes: list[str]) -> list[str]:
    """What the command line suggests as it is typed (Textual's inline suggestion)."""
    return [f"{c} " if c in NEEDS_ARG else c for c in COMMANDS] + [
        f"theme {t}" for t in themes]

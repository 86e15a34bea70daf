"""Every console action once: its key, what it does, its footer label and its help line.
The bindings, the help screen (`?`) and the command palette (Ctrl+P) are all made from
this table, so a key added here is bound, documented and offered in one line (issue 33:
the bindings and the help rows were two parallel tables)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True, slots=True)
class Action:
    id: str | None      # the binding id: rebindable in the config's [ui.keys]
    keys: str           # default key(s), Textual's names
    action: str         # the App action, with its arguments: "seek(-1)"
    label: str          # the footer's text
    help: str | None    # the help screen's and palette's line (None: listed by hand)
    show: bool = True   # in the footer (else only in help and the palette)
    priority: bool = False


# In the footer's order: it cuts at the terminal's edge, so help, the command line and quit
# come first (always visible at 80 columns), then the run's controls.
ACTIONS: tuple[Action, ...] = (
    Action("app.help", "question_mark", "help", "Help", "Show the key bindings"),
    Action("app.command", "colon", "command_line", "Cmd",
           "Command line: :runs :keys :canary :cost :replay ID :q"),
    Action("app.quit", "q", "request_quit", "Quit", "Quit (asks while a run is active)"),
    Action("run.pause", "p", "toggle_pause", "Pause", "Pause / resume dispatch"),
    Action("run.more", "plus,equals_sign", "concurrency(1)", "±Conc", "Raise concurrency by 10"),
    Action("run.less", "minus", "concurrency(-1)", "-Conc", "Lower concurrency by 10",
           show=False),
    Action("run.cancel", "x", "cancel_run", "Cancel", "Cancel the run (asks first)"),
    Action("agent.cancel", "c", "cancel_agent", "Cancel agent",
           "Cancel the selected agent (asks first)", show=False),
    Action("grid.filter", "slash", "filter", "Filter", "Filter agents"),
    Action("app.history", "h", "history", "History", "Stored runs: replay, compare"),
    Action("app.canary", "g", "canary", "Canary", "Canary: stages, gates, promote / abort"),
    Action("app.keys", "k", "keys", "Keys", "API keys: state, add / retire / enable"),
    Action("app.cost", "dollar_sign", "cost", "Cost",
           "Cost: totals, projections, what-if per model"),
    Action("app.view", "v", "toggle_view", "View",
           "Agents (one per slot, what each does now) / every task"),
    Action("grid.sort", "s", "sort", "Sort", "Cycle sort: index / latency / state / cost"),
    Action("grid.next_failed", "f", "next_failed", "Next failed",
           "Jump to the next failed agent", show=False),
    Action("agent.copy", "y", "copy_task_id", "Copy id",
           "Copy the selected task id (OSC 52: works over SSH)", show=False),
    Action("log.focus", "l", "focus_log", "Log",
           "Event log: focus it to scroll back (arrows, pgup/pgdn)", show=False),
    # (before the log's own G: in a replay of a run still executing, G goes live)
    Action("replay.live", "G", "go_live", "Live", "Replay: back to now (a run still executing)",
           show=False),
    Action("log.follow", "G", "follow_log", "Follow log",
           "Event log: follow the newest lines again", show=False),
    Action("app.demo", "D", "demo", "Demo", "Start the demo swarm", show=False),
    Action("agent.describe", "d", "describe", "Describe",
           "Describe the selected agent (as enter; k9s d)", show=False),
    Action("app.freeze", "space", "freeze", "Freeze", "Freeze / unfreeze the display",
           show=False),
    Action("app.theme", "t", "next_theme", "Theme", "Next theme", show=False),
    # Ctrl-Q, and Ctrl-C as k9s and every shell: asks on a live run, quits at once when idle
    Action(None, "ctrl+q", "request_quit", "Quit", None, show=False, priority=True),
    Action(None, "ctrl+c", "request_quit", "Quit", None, show=False, priority=True),
    Action(None, "escape", "clear_filter", "Clear filter", None, show=False),
    # a replay moves through time: a second, ten, or to the next notable moment
    Action("replay.back", "comma", "seek(-1)", "-1s", "Replay: one second back", show=False),
    Action("replay.forward", "full_stop", "seek(1)", "+1s", "Replay: one second on",
           show=False),
    Action("replay.back10", "less_than_sign", "seek(-10)", "-10s",
           "Replay: ten seconds back", show=False),
    Action("replay.forward10", "greater_than_sign", "seek(10)", "+10s",
           "Replay: ten seconds on", show=False),
    Action("replay.prev", "left_square_bracket", "moment(-1)", "◀ moment",
           "Replay: the notable moment before"),
    Action("replay.next", "right_square_bracket", "moment(1)", "moment ▶",
           "Replay: the next notable moment"),
    # (after the live run's own space and c: each key acts where its action may)
    Action("replay.play", "space", "play", "Play", "Replay: play at 1×, 10×, 60×, pause",
           show=False),
    Action("replay.mark", "m", "mark", "Mark", "Replay: mark this moment (to compare)",
           show=False),
    Action("replay.compare", "c", "compare_moments", "Compare",
           "Replay: what changed since the mark", show=False),
)


def bindings() -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    """(Typed as Textual's own BINDINGS.)"""
    return [Binding(a.keys, a.action, a.label, show=a.show, priority=a.priority, id=a.id)
            for a in ACTIONS]


def described() -> list[Action]:
    """The actions the help screen and the palette list, in the footer's order."""
    return [a for a in ACTIONS if a.help is not None and a.id is not None]

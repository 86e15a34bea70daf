"""The console: a dashboard over a snapshot source, refreshed at a fixed rate.

The engine (when the run is live) runs on its own thread and loop (run_sources/live.py),
never a Textual thread worker; the UI reads a snapshot every `refresh_s` and never
receives one message per engine event.

Why ~500 lines: it is the console's action table — one short method per key binding
(pause, concurrency, cancel, filter, sort, f/y/l/G, history, canary, keys, cost, quit)
and their guards. Screens, panels and widgets are in their own modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.app import App, ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.filter import Monochrome, NoColor
from textual.geometry import Size
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.timer import Timer
from textual.widgets import Footer, Input, Static
from textual.worker import Worker

from swarm_tui.canary.controller import CanaryView
from swarm_tui.core.commands import Command
from swarm_tui.core.fmt import shown
from swarm_tui.core.states import TaskState
from swarm_tui.engine.snapshot import Snapshot, TaskCell
from swarm_tui.errors import EXIT_HANGUP, UserError
from swarm_tui.run_sources.base import RunSource
from swarm_tui.settings.sections import CanaryConfig
from swarm_tui.ui.actions import bindings, described
from swarm_tui.ui.agents import AgentsView
from swarm_tui.ui.canary_panel import CanaryScreen
from swarm_tui.ui.command_line import CommandError, completions, parse
from swarm_tui.ui.cost_panel import CostScreen
from swarm_tui.ui.filtering import SORTS, FilterError, parse_filter, sort_cells
from swarm_tui.ui.grid import TaskGrid
from swarm_tui.ui.keys_panel import KeysScreen
from swarm_tui.ui.screens import ConfirmScreen, DetailScreen, HelpScreen, RunsScreen, TextScreen
from swarm_tui.ui.themes import load_themes
from swarm_tui.ui.widgets import EventLog, LatencyHistogram, StatusBar, sparkline_text

if TYPE_CHECKING:
    from swarm_tui.run_sources import StoreSource
    from swarm_tui.store.target import DbTarget

CONCURRENCY_STEP = 10
PLAY_TICK_S = 0.25  # a playing replay moves this often (its speed × this, of run time)
RUN_CONTROLS = {"toggle_pause", "concurrency", "cancel_run", "cancel_agent"}


_KEY_NAMES = {"question_mark": "?", "slash": "/", "plus": "+", "equals_sign": "=",
              "minus": "-", "space": "space", "dollar_sign": "$", "colon": ":",
              "comma": ",", "full_stop": ".", "less_than_sign": "<",
              "greater_than_sign": ">", "left_square_bracket": "[",
              "right_square_bracket": "]"}


def _key_names(keys: str) -> str:
    return " ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))




class Dashboard(Screen[None]):
    def __init__(self, view: str) -> None:
        super().__init__()
        self.view = view  # "agents" | "tasks": which of the two is shown first

    def compose(self) -> ComposeResult:
        agents = self.view == "agents"
        yield StatusBar(id="status")
        yield Static("", id="timebar", classes="hidden", markup=False)  # a replay's clock
        yield AgentsView(id="agents", classes="" if agents else "hidden")
        yield TaskGrid(id="grid", classes="hidden" if agents else "")
        with Horizontal(id="bottom"):
            yield EventLog(id="log")
            yield LatencyHistogram(id="hist")
        yield Static("", id="message", markup=False)  # filter text, errors: never markup
        yield Input(placeholder="filter: state:failed model:kimi !bucket:candidate regex…",
                    id="filter")
        yield Input(placeholder=":runs :keys :canary :cost :replay ID :theme NAME :q "
                    "(→ completes)", id="command")
        yield Footer()



HANGUP_EXIT_S = 2.0       # after the run is stored: Textual's own exit, or this
HANGUP_BACKSTOP_S = 20.0  # from the hang-up, whatever happens


def _leave_after(seconds: float) -> None:
    """Exit with 129 in `seconds` unless the process has ended by then (a daemon timer:
    it does not keep the process alive). Only ever armed on a hang-up."""
    timer = threading.Timer(seconds, os._exit, (EXIT_HANGUP,))
    timer.daemon = True
    timer.start()


class SwarmApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "swarm-tui"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = bindings()  # ui/actions.py: one table for keys, footer, help and palette

    def __init__(
        self,
        source: RunSource | None = None,
        *,
        start_source: Callable[[], RunSource] | None = None,
        db_target: DbTarget | None = None,
        refresh_s: float = 0.25,
        theme: str | None = None,
        keymap: dict[str, str] | None = None,
        readonly: bool = False,
        idle_message: str = "",
        theme_dir: Path | None = None,
        canary: CanaryConfig | None = None,
        view: str = "agents",
    ) -> None:
        super().__init__()
        if self.no_color:
            # NO_COLOR is no colour codes at all (no-color.org), not grey ones: Textual's
            # Monochrome filter still sent 76 grey 256-colour codes. Bold, reverse and the
            # grid's glyphs (and its ◂ cursor) still tell states and selection apart.
            self._filters = [f for f in self._filters if not isinstance(f, Monochrome)]
            self._filters.append(NoColor())
        self.view = view  # "agents": one cell per concurrency slot; "tasks": every task
        self.canary_cfg = canary
        self.source: RunSource | None = source
        self.start_source = start_source  # builds a LiveSource on demand (demo key)
        self.db_target = db_target
        self.refresh_s = refresh_s
        self.readonly = readonly
        self.idle_message = idle_message
        self.frozen = False
        self.filter_text = ""
        self._filter: Callable[[TaskCell], bool] | None = None  # parsed once per change
        self.sort_order = SORTS[0]
        self.snapshot: Snapshot | None = None
        self._shown_message: str | None = None
        self._shown_size: Size | None = None
        self.message = ""
        # a replay: its play speed, a marked moment
        self._speed: int | None = None
        self._player: Timer | None = None
        self._mark: tuple[float, Snapshot] | None = None
        self._themes = load_themes(theme_dir)
        self._wanted_theme = theme or "swarm-dark"
        self._keymap = keymap or {}
        self._worker: Worker[object] | None = None
        self._want_concurrency: int | None = None
        self._bindings_for: tuple[bool, bool] | None = None
        self._said_client_bound = False  # the `?` after p95 explained once
        self._ticking = False  # a tick is reading the source (never two at once)
        self._tick_again = False  # …and another was asked for meanwhile

    # -- lifecycle -----------------------------------------------------------------------
    def on_mount(self) -> None:
        for t in self._themes.values():
            self.register_theme(t)
        if self._wanted_theme not in self.available_themes:
            raise UserError(f"--theme {self._wanted_theme}: unknown (known: "
                            f"{', '.join(sorted(self._themes))})")
        self.theme = self._wanted_theme
        if self._keymap:
            self.set_keymap(self._keymap)
        self.push_screen(Dashboard(self.view))
        if self.source is not None:
            self._start(self.source)
        self.set_interval(self.refresh_s, self.tick)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            # an SSH hang-up: cancel the run cleanly (resumable) rather than die mid-write
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._hang_up)

    def _hang_up(self) -> None:
        # The terminal is gone: Textual's exit restores it by writing to it, and its writer
        # thread blocks on a terminal nobody reads (a closed tmux window left consoles alive
        # for hours). So once the run is stored cancelled, the process leaves on its own
        # clock whatever the exit path does; a backstop if storing itself hangs.
        _leave_after(HANGUP_BACKSTOP_S)

        async def leave() -> None:
            if self.source is not None and self.run_active and self.source.kind == "live":
                await self.source.shutdown()
            _leave_after(HANGUP_EXIT_S)
            self.exit(EXIT_HANGUP, return_code=EXIT_HANGUP)

        self.run_worker(leave(), exclusive=True, group="hangup")
        self.call_later(self.tick)

    async def on_unmount(self) -> None:
        if self.source is not None:
            await self.source.shutdown()

    def _start(self, source: RunSource) -> None:
        self.source = source
        if isinstance(self.screen, Dashboard) and self.screen.query(EventLog):
            self.screen.query_one(EventLog).reset()  # never another run's lines
        # live: the worker lasts the run (exclusive: one engine); stored: it opens and ends
        live = source.kind == "live"
        self._worker = self.run_worker(self._first_frame(source), name="engine" if live
                                       else "open", exclusive=live, exit_on_error=False)

    async def _first_frame(self, source: RunSource) -> None:
        """Start the source and draw it at once, not a refresh period later (a replay's
        moment was on screen only at the first tick after its open)."""
        if source.kind == "live":  # the engine's start lasts the run: draw it starting
            self.call_after_refresh(self.tick)
            await source.start()
            return
        await source.start()
        await self.tick()

    def _shown_dashboard(self) -> Dashboard | None:
        """The dashboard if it is the screen shown; None otherwise — also while the app
        is closing (a refresh tick that fires as the screens are taken down found none)."""
        try:
            screen = self.screen
        except ScreenStackError:
            return None
        return screen if isinstance(screen, Dashboard) else None

    async def tick(self) -> None:
        if self._ticking:  # one read of the source at a time: the running tick reads
            self._tick_again = True  # once more when it ends (a seek, a first frame)
            return
        self._ticking = True
        try:
            self._tick_again = True
            while self._tick_again:
                self._tick_again = False
                await self._tick()
        finally:
            self._ticking = False

    async def _tick(self) -> None:
        can = (self.may_control(), self.source is None)
        if can != self._bindings_for:  # a run started, ended, was replaced: redo footer
            try:
                self.refresh_bindings()
            except ScreenStackError:
                return  # the app is closing: its screens are down (a run that ended as a
                # one-core test closed its console raised here)
            self._bindings_for = can
        if self.frozen or self._shown_dashboard() is None:
            return
        snap = None
        if self.source is not None:
            if self.source.error:
                self.message = f"error: {self.source.error}"
            try:
                snap = await self.source.snapshot()
            except (AssertionError, UserError) as e:
                self.message = str(e) if isinstance(e, UserError) else self.message
        if (snap is not None and snap is self.snapshot and self.message == self._shown_message
                and self.size == self._shown_size and self.source is not None
                and self.source.kind in ("replay", "watch") and not self.source.active):
            # a finished replay (or a watched run that ended) hands back the same snapshot:
            # nothing to redraw (not for a live run: a first frame drawn before the layout
            # settled is redrawn by the next tick — skipping that left stale pictures)
            return
        self.snapshot = snap
        self._shown_message, self._shown_size = self.message, self.size
        if snap is not None and snap.client_bound and not self._said_client_bound:
            self._said_client_bound = True  # once a run: the `?` after p95, in words
            self.notify("p95 …? — this process runs its own work late (client-bound): the "
                        "latency is partly ours, so the SLA draws no verdict from it (? help)",
                        severity="warning", timeout=8)
        self.render_snapshot()

    def render_snapshot(self) -> None:
        screen = self._shown_dashboard()
        if screen is None or not screen.query(StatusBar):
            return  # not composed yet (a tick can come first), or closing
        s = self.snapshot
        idle = self.idle_message if self.source is None else "starting…"
        screen.query_one(StatusBar).show(s, idle if s is None else "", self.frozen)
        message = self.message
        cells = list(s.cells) if s is not None else []
        if self._filter is not None:
            total = len(cells)
            cells = [c for c in cells if self._filter(c)]
            message = f"filter: {self.filter_text} ({len(cells)} of {total} agents)"
        screen.query_one("#message", Static).update(message)
        if s is None:
            return
        cells = sort_cells(cells, self.sort_order)
        screen.query_one(TaskGrid).update_cells(tuple(cells))
        if self.view == "agents":
            screen.query_one(AgentsView).show(s)
        screen.query_one(EventLog).feed(s.log)
        screen.query_one(LatencyHistogram).show(s, sparkline_text(s.sparkline))
        self._draw_time_bar(screen)

    def _draw_time_bar(self, screen: Screen) -> None:
        from swarm_tui.ui.time_bar import time_bar_text

        bar = screen.query_one("#timebar", Static)
        source = self._replayed()
        span = source.span() if source is not None else None
        bar.set_class(span is None, "hidden")
        if source is None or span is None:
            return
        at = source.at if source.at is not None else span[1]
        moments = [t for t, _what in source.moments_read or ()]  # read with the moment
        bar.update(time_bar_text(at, span, moments, max(20, screen.size.width - 2),
                                 self._speed, self._mark[0] if self._mark else None))

    @property
    def run_active(self) -> bool:
        return self.source is not None and self.source.active

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Toasts carry errors and names from gateways and workloads: shown, never obeyed
        by the terminal (core/fmt.shown), and never markup, whoever asks (a widget's own
        notify passes markup=True): a label `team[/x]` or `[@click=app.quit]` is text, and
        our own `[canary]` showed as nothing."""
        del markup
        super().notify(shown(message, lines=True), title=shown(title), severity=severity,
                       timeout=timeout, markup=False)

    # -- screenshots ---------------------------------------------------------------------
    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot, saved here 0600 like an export (it shows task ids,
        errors and cost: the operator's data; Textual's own save follows the umask, 0644
        on a shared host). In a browser (`serve`) the browser receives it, as Textual does."""
        if self.is_web:
            return super().deliver_screenshot(filename, path, time_format)
        import time

        from swarm_tui.paths import downloads_dir
        from swarm_tui.report.history import written_to

        name = filename or time.strftime(f"swarm-tui {time_format or '%Y-%m-%dT%H_%M_%S'}.svg")
        target = (Path(path) if path else downloads_dir()) / name
        try:
            with written_to(str(target), "screenshot not saved:") as out:
                out.write(self.export_screenshot())
        except UserError as e:  # a full disk leaves no half picture behind
            self.notify(str(e), severity="error", markup=False)
            return None
        self.notify(f"screenshot saved to {target}", title="Screenshot", markup=False)
        return None

    # -- commands palette ----------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's own Quit (no question on a live run), Keys and Theme are ours below:
        # each command once, and only those this console can do now
        yield from (c for c in super().get_system_commands(screen)
                    if c.title not in {"Quit", "Keys", "Theme"})
        for entry in described():
            assert entry.help is not None
            if self.check_action(entry.action.split("(")[0], ()):
                yield SystemCommand(entry.help, entry.help,
                                    lambda a=entry.action: self.run_action(a))

    # -- what this console can do now: the footer and palette show only that ----------------
    def may_control(self) -> bool:
        """Whether run controls (pause, concurrency, cancel) can act here: not read-only,
        not a replay, a run going."""
        src = self.source
        return (not self.readonly and src is not None and not src.readonly
                and src.kind != "replay" and src.active)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in RUN_CONTROLS:
            return self.may_control()
        if action in ("seek", "moment", "play", "mark"):
            return self._replayed() is not None
        if action == "go_live":
            source = self._replayed()
            return (source is not None and source.record is not None
                    and source.record.effective_status() == "running")
        if action == "compare_moments":
            return self._replayed() is not None and self._mark is not None
        if action == "freeze":
            return self._replayed() is None  # a replay's space plays it
        if action == "demo":
            return self.source is None and self.start_source is not None
        return True

    def on_key(self, event: events.Key) -> None:
        """A run control's key where it is hidden still answers, in words."""
        if (event.key in self._run_control_keys() and isinstance(self.screen, Dashboard)
                and not self.may_control()
                and not (self._replayed() is not None and event.key == "c")):  # compare
            why = ("read-only console" if self.readonly or (
                self.source is not None and (self.source.readonly
                                             or self.source.kind == "replay"))
                   else "no active run")
            self.notify(f"{event.key}: {why}", severity="warning")

    def _run_control_keys(self) -> set[str]:
        keys: set[str] = set()
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.action.split("(")[0] in RUN_CONTROLS:
                keys.update(k.strip() for k in self._keymap.get(b.id or "", b.key).split(","))
        return keys

    def key_rows(self) -> list[tuple[str, str]]:
        rows = []
        by_id = {b.id: b for b in self.BINDINGS if isinstance(b, Binding) and b.id}
        for entry in described():
            assert entry.id is not None and entry.help is not None
            b = by_id.get(entry.id)
            keys = self._keymap.get(entry.id, b.key if b else "")
            if entry.id == "app.quit":
                keys += ",ctrl+q,ctrl+c"
            rows.append((_key_names(keys), entry.help))
        rows += [("arrows/pgup/pgdn", "Move in the agent grid"),
                 ("home/end", "First / last agent"), ("enter", "Agent detail"),
                 ("escape", "Back / clear filter / close the command line"),
                 ("ctrl+p", "Command palette: every action this console can do now")]
        return rows

    # -- actions -------------------------------------------------------------------------
    def _guard(self, what: str) -> RunSource | None:
        """The run's source when the action may change the run; None (and the user told
        why) otherwise."""
        if self.readonly or (self.source is not None and self.source.readonly):
            self.notify(f"{what}: read-only console", severity="warning")
            return None
        if self.source is None or not self.source.active:
            self.notify(f"{what}: no active run", severity="warning")
            return None
        return self.source

    async def _send(self, source: RunSource, command: Command, arg: str | None = None
                    ) -> bool:
        """A control command; a refusal (a read-only database role) is one line on screen."""
        try:
            return await source.control(command, arg)
        except UserError as e:
            self.notify(str(e), severity="error")
            return False

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_rows()))

    async def action_toggle_pause(self) -> None:
        source = self._guard("pause")
        if source is None:
            return
        paused = source.paused
        if await self._send(source, Command.RESUME if paused else Command.PAUSE):
            self.notify("resumed" if paused else "paused: no new calls; in-flight calls finish")

    async def action_concurrency(self, direction: int) -> None:
        source = self._guard("concurrency")
        if source is None or self.snapshot is None:
            return
        # from the latest *requested* value: ten fast presses are ten steps, though the
        # snapshot still shows the value before the first one
        if self._want_concurrency == self.snapshot.concurrency:
            self._want_concurrency = None  # applied: the snapshot is current again
        base = self._want_concurrency or self.snapshot.concurrency
        n = max(1, base + direction * CONCURRENCY_STEP)
        if await self._send(source, Command.CONCURRENCY, str(n)):
            self._want_concurrency = n
            self.notify(f"concurrency → {n}")

    def action_cancel_run(self) -> None:
        source = self._guard("cancel")
        if source is None:
            return

        async def answer(yes: bool | None) -> None:
            if yes and await self._send(source, Command.CANCEL):
                self.notify("run cancelled; in-flight calls stopped, results kept")

        self.push_screen(ConfirmScreen("Cancel the whole run? Queued tasks stay resumable."),
                         answer)

    def action_cancel_agent(self) -> None:
        cell = self._selected_cell()
        source = self._guard("cancel agent") if cell is not None else None
        if cell is None or source is None:
            return

        async def answer(yes: bool | None) -> None:
            if yes and await self._send(source, Command.CANCEL_AGENT, str(cell.seq)):
                self.notify(f"cancel requested for {cell.task_id}", markup=False)

        self.push_screen(ConfirmScreen(f"Cancel agent {cell.task_id}?"), answer)

    def action_filter(self) -> None:
        if self._dashboard_grid() is None:  # the filter is the tasks grid's
            return
        box = self.screen.query_one("#filter", Input)
        box.add_class("visible")
        box.value = self.filter_text
        box.focus()

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "command":
            await self._run_command(event.value)
        elif event.input.id == "filter":  # a dialog's inputs answer their own dialog
            self._apply_filter(event.value)

    def _apply_filter(self, text: str) -> None:
        box = self.screen.query_one("#filter", Input)
        self.filter_text = text.strip()
        try:
            self._filter = parse_filter(self.filter_text) if self.filter_text else None
            self.message = ""
        except FilterError as e:  # a bad pattern is said, not silently ignored
            self._filter = None
            self.message = f"filter not applied: {e}"
        box.remove_class("visible")
        grid = self._dashboard_grid()
        if grid is not None:
            grid.focus()
        self.render_snapshot()

    # -- the `:` command line (k9s) --------------------------------------------------------
    def action_command_line(self) -> None:
        if not isinstance(self.screen, Dashboard):
            return
        box = self.screen.query_one("#command", Input)
        box.suggester = SuggestFromList(completions(sorted(self._themes)),
                                        case_sensitive=False)
        box.value = ""
        box.add_class("visible")
        box.focus()

    def _close_command_line(self) -> None:
        if isinstance(self.screen, Dashboard):
            self.screen.query_one("#command", Input).remove_class("visible")
            self._focus_view()

    async def _run_command(self, line: str) -> None:
        self._close_command_line()
        try:
            cmd = parse(line)
        except CommandError as e:
            self.notify(str(e), severity="warning", markup=False)
            return
        if cmd.arg is None:
            await self.run_action(cmd.action)
        elif cmd.action == "replay":
            self._open_replay(cmd.arg)
        elif cmd.action == "theme":
            self.set_theme(cmd.arg)
        else:  # filter_to
            self._apply_filter(cmd.arg)

    def set_theme(self, name: str) -> None:
        if name not in self._themes:
            self.notify(f"unknown theme {name} (known: {', '.join(sorted(self._themes))})",
                        severity="warning", markup=False)
            return
        self.theme = name
        self.notify(f"theme: {name}")

    def action_view_agents(self) -> None:
        if self.view != "agents":
            self.action_toggle_view()

    def action_view_tasks(self) -> None:
        if self.view != "tasks":
            self.action_toggle_view()

    def action_clear_filter(self) -> None:
        if not isinstance(self.screen, Dashboard):
            return
        command = self.screen.query_one("#command", Input)
        if command.has_class("visible"):
            self._close_command_line()
            return
        box = self.screen.query_one("#filter", Input)
        box.remove_class("visible")
        self.filter_text = ""
        self._filter = None
        self.message = ""
        self._focus_view()
        self.render_snapshot()

    def _focus_view(self) -> None:
        if isinstance(self.screen, Dashboard):
            if self.view == "tasks":
                self.screen.query_one(TaskGrid).focus()
            else:  # arrows move over the agents here too
                self.screen.query_one(AgentsView).focus()

    def action_sort(self) -> None:
        self._dashboard_grid()  # sorting is the tasks grid's
        self.sort_order = SORTS[(SORTS.index(self.sort_order) + 1) % len(SORTS)]
        self.notify(f"sort: {self.sort_order}")
        self.render_snapshot()

    def _selected_cell(self) -> TaskCell | None:
        """The selected task: in the agents view, the one its selected agent works on."""
        if not isinstance(self.screen, Dashboard):
            return None
        if self.view == "agents":
            cell = self.screen.query_one(AgentsView).selected
            if cell is not None:
                return cell
            # an idle agent: the tasks grid's selected task, as before the agents view
            # took the arrows (enter on the dashboard always describes something)
        grid = self._dashboard_grid()
        return grid.selected if grid is not None else None

    def _dashboard_grid(self) -> TaskGrid | None:
        """The all-tasks grid (shown first, if the agents view was up)."""
        if not isinstance(self.screen, Dashboard):
            return None
        if self.view != "tasks":
            self.view = "tasks"
            self._apply_view()
        return self.screen.query_one(TaskGrid)

    def _apply_view(self) -> None:
        screen = self.screen
        if not isinstance(screen, Dashboard) or not screen.query(AgentsView):
            return
        agents = self.view == "agents"
        screen.query_one(AgentsView).set_class(not agents, "hidden")
        grid = screen.query_one(TaskGrid)
        grid.set_class(agents, "hidden")
        (screen.query_one(AgentsView) if agents else grid).focus()
        self.render_snapshot()

    def action_toggle_view(self) -> None:
        self.view = "tasks" if self.view == "agents" else "agents"
        self._apply_view()
        self.notify("view: every task (v: agents)" if self.view == "tasks"
                    else "view: agents, one per slot (v: every task)")

    def action_next_failed(self) -> None:
        grid = self._dashboard_grid()
        if grid is None:
            return
        if grid.next_in_state(TaskState.FAILED):
            grid.focus()
            cell = grid.selected
            assert cell is not None
            self.notify(f"failed: {cell.task_id} ({cell.error_class or 'error'})",
                        markup=False)
        else:
            self.notify("no failed agent in view", severity="information")

    def action_copy_task_id(self) -> None:
        cell = self._selected_cell()
        if cell is None:
            self.notify("no agent selected", severity="warning")
            return
        # OSC 52: the terminal (local, through SSH and tmux with set-clipboard on) puts it
        # on the clipboard of the machine you sit at
        self.copy_to_clipboard(cell.task_id)
        self.notify(f"copied {cell.task_id}", markup=False)

    def action_focus_log(self) -> None:
        if isinstance(self.screen, Dashboard):
            log = self.screen.query_one(EventLog)
            log.hold()
            log.focus()
            self.notify("event log: arrows / pgup / pgdn scroll, G follows the newest again")

    def action_go_live(self) -> None:
        """A replay of a run another process still executes: watch it now (read-only)."""
        from swarm_tui.run_sources import StoreSource

        source = self._replayed()
        if source is None or source.run_id is None or self.db_target is None:
            return
        self._stop_playing()
        self._mark = None
        self.snapshot = None
        self.message = "live: watching the run as it executes"
        self.run_worker(source.shutdown(), name="close-previous")
        self._start(StoreSource(self.db_target, source.run_id))

    def _stop_playing(self) -> None:
        self._speed = None
        if self._player is not None:
            self._player.stop()
            self._player = None

    def action_follow_log(self) -> None:
        if isinstance(self.screen, Dashboard):
            self.screen.query_one(EventLog).follow()
            self._focus_view()

    def _replayed(self) -> StoreSource | None:
        """The source when it is a replay (it can move through time), else None."""
        from swarm_tui.run_sources import StoreSource

        s = self.source
        return s if isinstance(s, StoreSource) and s.kind == "replay" else None

    def action_seek(self, seconds: float) -> None:
        source = self._replayed()
        span = source.span() if source is not None else None
        if source is None or span is None:
            return
        now = source.at or span[1]
        self._show_moment(source.seek(now + seconds), span)

    async def action_moment(self, direction: int) -> None:
        source = self._replayed()
        span = source.span() if source is not None else None
        if source is None or span is None:
            return
        now = source.at or span[1]
        moments = await source.moments()
        ahead = ([m for m in moments if m[0] > now + 0.001] if direction > 0
                 else [m for m in moments if m[0] < now - 0.001][::-1])
        if not ahead:
            self.notify("no notable moment " + ("after" if direction > 0 else "before")
                        + " this one", severity="information")
            return
        at, what = ahead[0]
        self._show_moment(source.seek(at), span, what)

    def _show_moment(self, at: float, span: tuple[float, float], what: str = "") -> None:
        """Say which moment is shown, and redraw it now (not at the next tick)."""
        from swarm_tui.core.moments import iso

        self.message = (f"replay at {iso(at)}{', ' + what if what else ''}  , . ±1s"
                        "  < > ±10s  [ ] moments  space play  m mark  c compare")
        screen = self._shown_dashboard()
        if screen is not None:
            screen.query_one(EventLog).reset()  # the log up to the new moment, afresh
        self.run_worker(self.tick(), exclusive=True, group="seek")

    def action_play(self) -> None:
        """Space in a replay: play at 1×, 10×, 60× of the run's own time, then pause."""
        from swarm_tui.ui.time_bar import next_speed

        self._speed = next_speed(self._speed)
        if self._player is not None:
            self._player.stop()
            self._player = None
        if self._speed is not None:
            self._player = self.set_interval(PLAY_TICK_S, self._play_step)
        self.notify("paused" if self._speed is None else f"playing at {self._speed}×")
        screen = self._shown_dashboard()
        if screen is not None:
            self._draw_time_bar(screen)

    def _play_step(self) -> None:
        source = self._replayed()
        span = source.span() if source is not None else None
        if source is None or span is None or self._speed is None:
            return
        now = source.at if source.at is not None else span[1]
        if now >= span[1]:  # the end: stop there
            self._stop_playing()
            self.notify("the end of the run")
            screen = self._shown_dashboard()
            if screen is not None:
                self._draw_time_bar(screen)
            return
        self.action_seek(PLAY_TICK_S * self._speed)

    def action_mark(self) -> None:
        source = self._replayed()
        if source is None or self.snapshot is None:
            return
        span = source.span()
        at = source.at if source.at is not None else (span[1] if span else 0.0)
        self._mark = (at, self.snapshot)
        self.refresh_bindings()
        self.notify("moment marked: move, then c shows what changed")
        screen = self._shown_dashboard()
        if screen is not None:
            self._draw_time_bar(screen)

    def action_compare_moments(self) -> None:
        from swarm_tui.ui.compare_moments import compare_text

        source = self._replayed()
        if source is None or self._mark is None or self.snapshot is None:
            return
        span = source.span()
        at = source.at if source.at is not None else (span[1] if span else 0.0)
        self.push_screen(TextScreen(compare_text(self._mark[1], self._mark[0],
                                                 self.snapshot, at)))

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.notify("display frozen (space to resume)" if self.frozen else "display live")

    def action_next_theme(self) -> None:
        names = sorted(self._themes)
        current = self.theme if self.theme in names else names[0]
        self.theme = names[(names.index(current) + 1) % len(names)]
        self.notify(f"theme: {self.theme}")

    def action_demo(self) -> None:
        if self.source is not None or self.start_source is None:
            self.notify("a run is already loaded", severity="warning")
            return
        self._start(self.start_source())

    async def on_task_grid_selected(self, message: TaskGrid.Selected) -> None:
        await self._describe(message.cell)

    async def action_describe(self) -> None:
        cell = self._selected_cell()
        if cell is None:
            self.notify("no agent selected (arrows choose; an idle agent has no call)",
                        severity="warning")
            return
        await self._describe(cell)

    async def _describe(self, cell: TaskCell) -> None:
        if self.source is None:
            return
        detail = await self.source.detail(cell.seq)
        if detail is not None:
            self.push_screen(DetailScreen(detail))

    async def action_history(self) -> None:
        from swarm_tui.run_sources import history

        if self.db_target is None or not history.has_runs(self.db_target):
            self.notify("no stored runs yet", severity="warning")
            return
        items = await history.listing(self.db_target, 200)
        self.push_screen(RunsScreen(items, self._replay, self._compare))

    def action_cost(self) -> None:
        if self.source is None:
            self.notify("no run here: start one (D) or replay one (h)", severity="warning")
            return
        self.push_screen(CostScreen(self.source))

    def action_keys(self) -> None:
        if self.source is None:
            self.notify("no run here: keys belong to a running swarm", severity="warning")
            return
        readonly = self.readonly or self.source.readonly
        self.push_screen(KeysScreen(self.source, readonly))

    def action_canary(self) -> None:
        live = self.source.canary_live() if self.source is not None else None
        if self.canary_cfg is None and live is not None:
            self.canary_cfg = live[0]  # e.g. the simulator's demo canary
        if self.canary_cfg is None or self.db_target is None:
            self.notify("no canary configured ([canary] baseline / candidate in the config)",
                        severity="warning")
            return
        readonly = self.readonly or (self.source is not None and self.source.readonly)

        def in_use() -> bool:
            live = self.source.canary_live() if self.source is not None else None
            return live is not None and live[1] is not None and bool(self.run_active)

        self.push_screen(CanaryScreen(self._canary_view, self._canary_act, readonly,
                                      in_use=in_use))

    async def _canary_view(self) -> CanaryView | None:
        from swarm_tui.canary.controller import read_view

        live = self.source.canary_live() if self.source is not None else None
        if live is not None and live[1] is not None:
            return live[1]  # this process's live run: its latest evaluation
        # after the run: what is stored (actions taken since went to the store)
        assert self.canary_cfg is not None and self.db_target is not None
        return await read_view(self.db_target, self.canary_cfg)

    async def _canary_act(self, action: str, arg: str | None, reason: str | None) -> None:
        from swarm_tui.canary.controller import act_stored

        if self.source is not None and await self.source.canary_act(action, arg, reason):
            return
        assert self.canary_cfg is not None and self.db_target is not None
        await act_stored(self.db_target, self.canary_cfg, action, arg, reason)

    def _replay(self, run_id: str) -> None:
        """From the history panel (which closes)."""
        self._open_replay(run_id, from_history=True)

    def _open_replay(self, run_id: str, from_history: bool = False) -> bool:
        from swarm_tui.run_sources import StoreSource, history

        if self.run_active:
            self.notify("a run is active here; replay it after it ends", severity="warning")
            return False
        if self.db_target is None or not history.has_runs(self.db_target):
            self.notify("no stored runs yet", severity="warning")
            return False
        if from_history:
            self.pop_screen()
        self.snapshot = None
        previous = self.source
        if previous is not None:
            self.run_worker(previous.shutdown(), name="close-previous")
        # at its end, through the replay's timeline (as `swarm-tui replay RUN` opens it):
        # its notable moments on the time bar at once, and the first move costs no second
        # read of the run (at 100,000 tasks each read is ~1.3 s)
        self._start(StoreSource(self.db_target, run_id, replay=True, at=math.inf))
        return True

    def _compare(self, a: str, b: str) -> None:
        self.run_worker(self._show_compare(a, b), name="compare")

    async def _show_compare(self, a: str, b: str) -> None:
        from swarm_tui.run_sources import history

        assert self.db_target is not None  # the history panel opens only with a database
        self.push_screen(TextScreen(await history.compare_text(self.db_target, a, b)))

    async def action_quit(self) -> None:
        """Textual's own quit (ctrl+q, the palette): the same question as `q`."""
        self.action_request_quit()

    def action_request_quit(self) -> None:
        # A live run cannot outlive this process, so quitting stops it: always ask first
        # (even read-only). Watching another process's run just detaches.
        source = self.source
        if source is None or not source.active or source.kind != "live":
            self.exit(0)
            return

        async def answer(yes: bool | None) -> None:
            if yes:
                await source.shutdown()  # cancelled, results flushed, then we leave
                self.exit(130, return_code=130)

        self.push_screen(ConfirmScreen("A run is active. Cancel it and quit? "
                                       "Unsent tasks stay resumable."), answer)

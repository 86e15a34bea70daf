"""The keys panel: every key by fingerprint with its state and counters; add (masked),
retire and enable, each confirmed, refused in read-only consoles."""

from __future__ import annotations

import math
import time

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label

from swarm_tui.core.fmt import shown
from swarm_tui.core.records import KeyRow
from swarm_tui.core.states import KeyState
from swarm_tui.errors import UserError
from swarm_tui.run_sources.base import RunSource
from swarm_tui.ui.screens import ConfirmScreen, Field, FormScreen, fit_columns

# fixed widths: a key's state changes length (active → cooling until 12:00:00) in place
COLUMNS = (("gateway", 9), ("key", 15), ("label", 10), ("state", 24), ("fly", 3),
           ("calls", 7), ("429s", 5), ("errors", 6), ("tokens", 8), ("last used", 9))
# which go first when the terminal is narrow (highest first): at 80 columns the key, its
# label, its state and its 429s stay whole
PRIORITY = (6, 0, 2, 1, 4, 5, 3, 7, 9, 8)


def state_text(k: KeyRow, now: float | None = None) -> str:
    """`now`: the clock the cooldown counts down on (a replay's moment; default: now)."""
    if k.state == KeyState.COOLING and k.cooling_until is not None:
        until = time.strftime('%H:%M:%S', time.localtime(k.cooling_until))
        left = math.ceil(k.cooling_until - (time.time() if now is None else now))
        # counting down while it lasts
        return f"cooling {left}s to {until}" if 0 < left < 1000 else f"cooling until {until}"
    if k.state == KeyState.DISABLED:
        return f"disabled: {k.reason or '?'}"[:60]
    return k.state


def row_cells(k: KeyRow, now: float | None = None) -> tuple[str, ...]:
    used = "-" if k.last_used is None else time.strftime("%H:%M:%S",
                                                          time.localtime(k.last_used))
    tokens = k.tokens_in + k.tokens_out
    return (shown(k.gateway), k.fingerprint, shown(k.label or "-"), shown(state_text(k, now)),
            str(k.in_flight), f"{k.calls:,}", str(k.rate_limited), str(k.errors),
            f"{tokens / 1000:,.1f}k" if tokens >= 10_000 else f"{tokens:,}", used)


def add_key_form(gateways: list[str]) -> FormScreen:
    """Gateway, key (a password field: typed, never shown), label."""
    return FormScreen(
        "Add an API key (it stays in memory; only its fingerprint is shown or stored)",
        [Field("key-gateway", "gateway", gateways[0] if gateways else ""),
         Field("key-secret", "API key", password=True),
         Field("key-label", "label (optional)")], "Add")


KEY_CHANGES = ("add", "retire", "enable")  # the actions a read-only console refuses


class KeysScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="keys.back"),
        Binding("a", "add", "Add key", id="keys.add"),
        Binding("r", "retire", "Retire", id="keys.retire"),
        Binding("e", "enable", "Enable", id="keys.enable"),
    ]

    def __init__(self, source: RunSource, readonly: bool, refresh_s: float = 0.5) -> None:
        super().__init__()
        self.source = source
        self.readonly = readonly
        self.refresh_s = refresh_s
        self.rows: tuple[KeyRow, ...] = ()

    def compose(self) -> ComposeResult:
        at = self.source.at
        when = "" if at is None else time.strftime("%H:%M:%S", time.localtime(at))
        title = ("API keys (fingerprints only) — a: add  r: retire  e: enable" if not
                 self.readonly else "API keys (fingerprints only; read-only console)")
        yield Label(title if not when else f"API keys at {when} (a replay: read-only)",
                    id="runs-title")
        yield DataTable(id="keys-table", cursor_type="row", zebra_stripes=True)
        yield Label("", id="keys-note")
        yield Footer()

    _keep: list[int] = []

    def _columns(self) -> None:
        """The columns this width shows; all of them again when it grows."""
        keep = fit_columns([(label, prio, ["x" * width])
                            for (label, width), prio in zip(COLUMNS, PRIORITY, strict=True)],
                           self.size.width - 2)
        if keep == self._keep:
            return
        self._keep = keep
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for i in keep:
            table.add_column(COLUMNS[i][0], width=COLUMNS[i][1])
        self.rows = ()  # every row is added again by the next reload

    def on_resize(self) -> None:
        self._columns()
        self.call_later(self.reload)

    def _cells(self, k: KeyRow) -> tuple[str, ...]:
        # a replay shows its moment's clock (its `at`); a live or watched run, now
        cells = row_cells(k, self.source.at)
        return tuple(cells[i] for i in self._keep)

    def on_mount(self) -> None:
        self._columns()
        self.set_interval(self.refresh_s, self.reload)
        self.call_later(self.reload)
        self.query_one(DataTable).focus()

    async def reload(self) -> None:
        rows, waiting = await self.source.keys()
        table = self.query_one(DataTable)
        if [(r.gateway, r.fingerprint) for r in rows] != [(r.gateway, r.fingerprint)
                                                          for r in self.rows]:
            cursor = table.cursor_row
            table.clear()
            for r in rows:
                table.add_row(*self._cells(r), key=f"{r.gateway}:{r.fingerprint}")
            if rows:
                table.move_cursor(row=min(cursor, len(rows) - 1))
        else:  # same keys: update cells in place (a handful of rows, once per refresh)
            for r, old in zip(rows, self.rows, strict=True):
                if r != old:
                    for col, (new_v, old_v) in enumerate(zip(self._cells(r), self._cells(old),
                                                             strict=True)):
                        if new_v != old_v:
                            table.update_cell_at(Coordinate(rows.index(r), col), new_v)
        self.rows = rows
        note = "" if rows else "no keys: no run here (keys belong to a running swarm)"
        if waiting:
            note = f"every key of {waiting} is cooling: dispatch is waiting"
        self.query_one("#keys-note", Label).update(note)

    def _selected(self) -> KeyRow | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console (a replay among them) offers no key change in its footer;
        the keys still answer, in words (on_key)."""
        return not (self.readonly and action in KEY_CHANGES)

    def on_key(self, event: events.Key) -> None:
        action = next((b.action for b in self.BINDINGS if isinstance(b, Binding)
                       and event.key in b.key.split(",")), None)
        if self.readonly and action in KEY_CHANGES:
            event.stop()
            self._allowed(f"{action} key")

    def _allowed(self, what: str) -> bool:
        if self.readonly:
            self.notify(f"{what}: read-only console", severity="warning")
            return False
        return True

    async def _run(self, op: str, ref: str, secret: str | None = None,
                   label: str | None = None) -> None:
        try:
            msg = await self.source.key_op(op, ref, secret, label)
        except UserError as e:
            self.notify(str(e), severity="error")
            return
        self.notify(msg)
        await self.reload()

    def action_add(self) -> None:
        if not self._allowed("add key"):
            return
        gateways = sorted({r.gateway for r in self.rows})

        async def answer(result: dict[str, str] | None) -> None:
            if result is not None:
                await self._run("add", result["key-gateway"], result["key-secret"],
                                result["key-label"] or None)

        self.app.push_screen(add_key_form(gateways), answer)

    def _confirm(self, op: str, question: str) -> None:
        key = self._selected()
        if key is None or not self._allowed(f"{op} key"):
            return

        async def answer(yes: bool | None) -> None:
            if yes:
                await self._run(op, f"{key.gateway}:{key.fingerprint}")

        self.app.push_screen(ConfirmScreen(question.format(fp=key.fingerprint)), answer)

    def action_retire(self) -> None:
        self._confirm("retire", "Retire key {fp}? No new calls; calls in flight finish.")

    def action_enable(self) -> None:
        self._confirm("enable", "Enable key {fp} again (clears its cooldown)?")

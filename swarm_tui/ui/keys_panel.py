"""The keys panel: every key by fingerprint with its state and counters; add (masked),
retire and enable, each confirmed, refused in read-only consoles."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, Label

from swarm_tui.engine.live import KeyRow
from swarm_tui.errors import UserError
from swarm_tui.ui.screens import ConfirmScreen

# fixed widths: a key's state changes length (active → cooling until 12:00:00) in place
COLUMNS = (("gateway", 9), ("key", 15), ("label", 10), ("state", 24), ("fly", 3),
           ("calls", 7), ("429s", 5), ("errors", 6), ("tokens", 8), ("last used", 9))


def state_text(k: KeyRow) -> str:
    if k.state == "cooling" and k.cooling_until is not None:
        return f"cooling until {time.strftime('%H:%M:%S', time.localtime(k.cooling_until))}"
    if k.state == "disabled":
        return f"disabled: {k.reason or '?'}"[:60]
    return k.state


def row_cells(k: KeyRow) -> tuple[str, ...]:
    used = "-" if k.last_used is None else time.strftime("%H:%M:%S",
                                                          time.localtime(k.last_used))
    tokens = k.tokens_in + k.tokens_out
    return (k.gateway, k.fingerprint, k.label or "-", state_text(k), str(k.in_flight),
            f"{k.calls:,}", str(k.rate_limited), str(k.errors),
            f"{tokens / 1000:,.1f}k" if tokens >= 10_000 else f"{tokens:,}", used)


class AddKeyScreen(ModalScreen[tuple[str, str, str] | None]):
    """(gateway, key, label) — the key typed into a password field, never echoed."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="keys.add.cancel")]

    def __init__(self, gateways: list[str]) -> None:
        super().__init__()
        self.gateways = gateways

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label("Add an API key (it stays in memory; only its fingerprint is shown "
                        "or stored)", id="confirm-question")
            yield Input(value=self.gateways[0] if self.gateways else "",
                        placeholder="gateway", id="key-gateway")
            yield Input(placeholder="API key", password=True, id="key-secret")
            yield Input(placeholder="label (optional)", id="key-label")
            with Horizontal(id="confirm-buttons"):
                yield Button("Add (enter)", id="yes", variant="error")
                yield Button("Cancel (esc)", id="no")

    def on_mount(self) -> None:
        self.query_one("#key-secret" if self.gateways else "#key-gateway", Input).focus()

    def _answer(self) -> tuple[str, str, str]:
        return (self.query_one("#key-gateway", Input).value.strip(),
                self.query_one("#key-secret", Input).value.strip(),
                self.query_one("#key-label", Input).value.strip())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        order = ["key-gateway", "key-secret", "key-label"]
        i = order.index(event.input.id or "key-label")
        if i < len(order) - 1:
            self.query_one(f"#{order[i + 1]}", Input).focus()
        else:
            self.dismiss(self._answer())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self._answer() if event.button.id == "yes" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class KeysScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="keys.back"),
        Binding("a", "add", "Add key", id="keys.add"),
        Binding("r", "retire", "Retire", id="keys.retire"),
        Binding("e", "enable", "Enable", id="keys.enable"),
    ]

    def __init__(self, source, readonly: bool, refresh_s: float = 0.5) -> None:
        super().__init__()
        self.source = source
        self.readonly = readonly
        self.refresh_s = refresh_s
        self.rows: tuple[KeyRow, ...] = ()

    def compose(self) -> ComposeResult:
        yield Label("API keys (fingerprints only) — a: add  r: retire  e: enable",
                    id="runs-title")
        yield DataTable(id="keys-table", cursor_type="row", zebra_stripes=True)
        yield Label("", id="keys-note")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, width in COLUMNS:
            table.add_column(label, width=width)
        self.set_interval(self.refresh_s, self.reload)
        self.call_later(self.reload)
        self.query_one(DataTable).focus()

    async def reload(self) -> None:
        snap = await self.source.snapshot() if self.source is not None else None
        rows = snap.keys if snap is not None else ()
        table = self.query_one(DataTable)
        if [(r.gateway, r.fingerprint) for r in rows] != [(r.gateway, r.fingerprint)
                                                          for r in self.rows]:
            cursor = table.cursor_row
            table.clear()
            for r in rows:
                table.add_row(*row_cells(r), key=f"{r.gateway}:{r.fingerprint}")
            if rows:
                table.move_cursor(row=min(cursor, len(rows) - 1))
        else:  # same keys: update cells in place (a handful of rows, once per refresh)
            for r, old in zip(rows, self.rows, strict=True):
                if r != old:
                    for col, (new_v, old_v) in enumerate(zip(row_cells(r), row_cells(old),
                                                             strict=True)):
                        if new_v != old_v:
                            table.update_cell_at((rows.index(r), col), new_v)
        self.rows = rows
        note = "" if rows else "no keys: no run here (keys belong to a running swarm)"
        if snap is not None and snap.waiting_for_keys:
            note = f"every key of {snap.waiting_for_keys} is cooling: dispatch is waiting"
        self.query_one("#keys-note", Label).update(note)

    def _selected(self) -> KeyRow | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]

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

        async def answer(result: tuple[str, str, str] | None) -> None:
            if result is not None:
                gateway, secret, label = result
                await self._run("add", gateway, secret, label or None)

        self.app.push_screen(AddKeyScreen(gateways), answer)

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

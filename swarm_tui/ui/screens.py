"""Secondary screens: agent detail, help, confirmation, run history, compare."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, Label, Static

from swarm_tui.core import fmt
from swarm_tui.core.fmt import shown
from swarm_tui.core.states import TaskState
from swarm_tui.run_sources import TaskDetail

if TYPE_CHECKING:
    from swarm_tui.report.listing import RunListItem



def detail_text(d: TaskDetail) -> str:
    cost = "unpriced" if d.cost_usd is None and d.state == TaskState.SUCCEEDED else (
        "-" if d.cost_usd is None else f"${d.cost_usd:.6f}")
    head = [
        f"task {d.task_id}  (#{d.seq})  state {d.state.upper()}",
        f"model {d.model}  gateway {d.gateway}  bucket {d.bucket}  key {d.key_fp or '-'}",
        f"latency {fmt.ms(d.latency_ms, unit=True)}  ttft {fmt.ms(d.ttft_ms, unit=True)}  "
        f"queue {fmt.ms(d.queue_ms, unit=True)}  "
        f"tokens {d.tokens_in}/{d.tokens_out}  cost {cost}",
    ]
    if d.error:
        head.append(f"error {d.error}")
    head.append("")
    head.append(f"{'#':>2} {'model':<16} {'queue':>8} {'latency':>8} {'ttft':>7} "
                f"{'status':>6} {'outcome':<8} detail")
    for a in d.attempts:
        detail = a.get("error_class") or ""
        if a.get("retry_detail"):  # what the engine did: another key, a fallback
            detail = a["retry_detail"]
        if a.get("retry_wait_s") is not None:
            detail += f" retry in {a['retry_wait_s']:.2f}s"
        if a.get("error_message"):
            detail += f" — {a['error_message'][:60]}"
        head.append(f"{a['number']:>2} {a['model'][:16]:<16} {fmt.ms(a['queue_ms'], unit=True):>8} "
                    f"{fmt.ms(a['latency_ms'], unit=True):>8} {fmt.ms(a['ttft_ms'], unit=True):>7} "
                    f"{a.get('status_code') or '-':>6} {a['outcome']:<8} {detail}")
    head += ["", "prompt:", d.prompt[:400] + ("…" if len(d.prompt) > 400 else ""), "",
             "response:", d.response_text or "(none yet)"]
    return "\n".join(head)


class DetailScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="detail.back")]

    def __init__(self, detail: TaskDetail) -> None:
        super().__init__()
        self.detail = detail

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            # the prompt, the model's answer and the gateway's errors: shown, never obeyed
            yield Static(shown(detail_text(self.detail), lines=True), id="detail-text",
                         markup=False)
        yield Footer()


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        lines = ["[b]swarm-tui keys[/]  (rebind in the config: \\[ui.keys] id = \"key\")", ""]
        width = max((len(k) for k, _ in self.rows), default=0)  # one column, aligned
        lines += [f"[b]{escape(k):>{width}}[/]  {escape(d)}" for k, d in self.rows]
        lines += ["", "Filter (/): state:failed model:kimi bucket:candidate error:rate, a",
                  "regex on the task id; ! inverts a word.  Ctrl+P: command palette.",
                  "", "[b]Status bar[/]",
                  "  ok 99.4%/call  the success the SLA judges (per call, retries and 429s",
                  "                 in; \\[sla] success_basis = \"task\" judges tasks)",
                  "  p95 290ms!     past the SLA (! on the success rate too)",
                  "  p95 290ms?     this process ran its own work late (client-bound):",
                  "                 the latency is partly ours, so no SLA verdict from it",
                  "  keys 1/2       keys ready / all (k: which one cools, and for how long)",
                  "  $1.23+? / ~    some tasks unpriced / usage estimated (none reported)"]
        with VerticalScroll(id="help"):
            yield Static("\n".join(lines), id="help-text")


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes", id="confirm.yes"),
                Binding("n,escape", "answer(False)", "No", id="confirm.no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            # plain text: a question may hold a workload's task id (`job[/x]` is markup)
            yield Label(shown(self.question), id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


@dataclass(frozen=True)
class Field:
    id: str
    placeholder: str
    value: str = ""
    password: bool = False  # typed but never shown (API keys)


class FormScreen(ModalScreen[dict[str, str] | None]):
    """A question, a few inputs, confirm / cancel: enter moves to the next input and
    confirms on the last; escape cancels. Answers {field id: stripped value} or None."""

    # enter moves focus here, before the next key is dispatched: as the Input's own
    # Submitted message it arrived after keys typed fast behind it, which went on into
    # the field just left (a label typed into the secret field)
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="form.cancel"),
                Binding("enter", "next_field", "Next", id="form.next", show=False,
                        priority=True)]

    def __init__(self, question: str, fields: list[Field], confirm: str) -> None:
        super().__init__()
        self.question = question
        self.fields = fields
        self.confirm = confirm

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self.question, id="confirm-question")
            for f in self.fields:
                yield Input(value=f.value, placeholder=f.placeholder, password=f.password,
                            id=f.id)
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.confirm} (enter)", id="yes", variant="error")
                yield Button("No (esc)", id="no")

    def on_mount(self) -> None:
        first_empty = next((f for f in self.fields if not f.value), self.fields[0])
        # focused now, not on a later turn: keys typed as the form appears are its own
        self.set_focus(self.query_one(f"#{first_empty.id}", Input))

    def _answer(self) -> dict[str, str]:
        return {f.id: self.query_one(f"#{f.id}", Input).value.strip() for f in self.fields}

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        ids = [f.id for f in self.fields]
        if event.input.id == ids[-1]:
            self.dismiss(self._answer())
        else:  # (the binding above moves on first; this only if it ever does not)
            self.action_next_field()

    def action_next_field(self) -> None:
        focused = self.focused
        if isinstance(focused, Button):
            focused.press()
            return
        ids = [f.id for f in self.fields]
        i = ids.index(focused.id) if focused is not None and focused.id in ids else len(ids) - 1
        if i < len(ids) - 1:
            self.set_focus(self.query_one(f"#{ids[i + 1]}", Input))  # now, not later
        elif isinstance(focused, Input):
            # the last field answers through its own Submitted, behind the keys typed
            # before this enter (in its queue still: read here, a fast label lost two)
            raise SkipAction()
        else:
            self.dismiss(self._answer())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self._answer() if event.button.id == "yes" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def fit_columns(columns: list[tuple[str, int, list[str]]], width: int,
                pad: int = 2) -> list[int]:
    """The indexes of the columns to show, in order: each column as wide as its widest
    cell, the highest priority numbers dropped first until the rest fit `width`."""
    need = [max([len(label), *map(len, cells)]) + pad for label, _, cells in columns]
    keep = list(range(len(columns)))
    for i in sorted(keep, key=lambda i: -columns[i][1]):
        if sum(need[j] for j in keep) <= width or len(keep) == 1:
            break
        keep.remove(i)
    return keep


class RunsScreen(Screen[None]):
    """Stored runs (DataTable is fine here: it changes only when reloaded)."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="runs.back"),
        Binding("enter", "open", "Replay", id="runs.open"),
        Binding("m", "mark", "Mark for compare", id="runs.mark"),
        Binding("c", "compare", "Compare with mark", id="runs.compare"),
    ]

    def __init__(self, items: list[RunListItem], on_open: Callable[[str], object],
                 on_compare: Callable[[str, str], object]) -> None:
        super().__init__()
        self.items = items
        self.on_open = on_open
        self.on_compare = on_compare
        self.marked: str | None = None

    def compose(self) -> ComposeResult:
        yield Label("Runs (newest first) — enter: replay, m: mark, c: compare with mark",
                    id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    # (label, priority): at a narrow width the highest numbers go first, and what is
    # shown stays whole (the cost column read `$0.` at 80 columns)
    COLUMNS = (("run", 0), ("name", 7), ("status", 1), ("tasks", 2), ("task ok", 6),
               ("call ok", 4), ("p95 ms", 5), ("cost", 3))

    def on_mount(self) -> None:
        self._rows = [self._cells(r) for r in self.items]
        self._shown_for = -1
        self._fill()
        self.query_one(DataTable).focus()

    @staticmethod
    def _cells(r: RunListItem) -> tuple[str, ...]:
        p95 = "-" if r.p95_ms is None else f"{r.p95_ms:.0f}"
        cost = fmt.usd(r.cost_usd) + ("+?" if r.unpriced_tasks else "")
        return (r.id, shown((r.name or ("sim" if r.simulated else ""))[:12]), r.status,
                f"{r.done}/{r.total}", fmt.pct(r.success_rate), fmt.pct(r.call_success_rate),
                p95, cost)

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        width = self.size.width
        if width == self._shown_for or not width:
            return
        self._shown_for = width
        keep = fit_columns([(label, prio, [row[i] for row in self._rows])
                            for i, (label, prio) in enumerate(self.COLUMNS)], width - 2)
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear(columns=True)
        table.add_columns(*(self.COLUMNS[i][0] for i in keep))
        for r, cells in zip(self.items, self._rows, strict=True):
            table.add_row(*(cells[i] for i in keep), key=r.id)
        if self._rows:
            table.move_cursor(row=min(row, len(self._rows) - 1))

    def _current(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.items:
            return None
        return self.items[table.cursor_row].id

    def action_open(self) -> None:
        run_id = self._current()
        if run_id:
            self.on_open(run_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()  # the table consumes enter itself; it means "replay this run"
        self.action_open()

    def action_mark(self) -> None:
        self.marked = self._current()
        self.notify(f"marked {self.marked}; move to another run and press c")

    def action_compare(self) -> None:
        other = self._current()
        if self.marked and other and other != self.marked:
            self.on_compare(self.marked, other)
        else:
            self.notify("mark a run with m first, then select another", severity="warning")


class TextScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="text.back")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text, markup=False)
        yield Footer()

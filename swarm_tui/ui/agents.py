"""The agents view: one cell per concurrency slot — what each of the swarm's agents is
doing right now (its task, state, time on the current call, streamed tokens).

It always fits the screen: the cell width is the widest at which every slot fits, from
`◐ demo-00042    1.2s 340t` down to a bare glyph, so 140 agents read at 80×24 without
scrolling. Drawn with the Line API, redrawn whole each refresh (the times move anyway).
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from swarm_tui.core.fmt import shown
from swarm_tui.engine.snapshot import SlotCell, Snapshot, TaskCell
from swarm_tui.ui.grid import CURSOR_BINDINGS, GLYPHS

WIDTHS = (28, 20, 14, 9, 7, 6, 3, 2)  # a cell's width, widest first (with its gap)
IDLE = "·"


def fit(n: int, width: int, height: int) -> tuple[int, int]:
    """(cell width, columns): the widest cell at which n cells fit width × height."""
    for w in WIDTHS:
        cols = max(1, width // w)
        if -(-n // cols) <= height:
            return w, cols
    return WIDTHS[-1], max(1, width // WIDTHS[-1])


def _elapsed(s: float) -> str:
    if s < 10:
        return f"{s:.1f}s"
    if s < 600:
        return f"{s:.0f}s"
    return f"{s / 60:.0f}m"


def _tokens(chars: int | None) -> str:
    if chars is None:
        return ""
    t = chars // 4  # the estimate the engine uses for streamed text
    return f"{t}t" if t < 1000 else f"{t / 1000:.1f}kt"


def cell_text(slot: SlotCell, now_s: float, w: int) -> str:
    c = slot.cell
    if c is None:
        return IDLE.ljust(w)[:w]
    glyph = GLYPHS.get(c.state, "?")
    took = _elapsed(max(0.0, now_s - slot.started_s)) if slot.started_s is not None else ""
    tok = _tokens(slot.chars)
    if w >= 28:
        text = f"{glyph} {shown(c.task_id[-12:]):<12} {took:>5} {tok:>5}"
    elif w >= 20:
        text = f"{glyph} {shown(c.task_id[-6:]):<6} {took:>5} {tok:>5}"
    elif w >= 14:
        text = f"{glyph} {took:>5} {tok:>5}"
    elif w >= 9:
        text = f"{glyph} {took:>5}"
    elif w >= 7:
        text = f"{glyph} {took:>4}"
    elif w >= 6:
        text = f"{glyph} {took[:3]:>3}"
    else:
        text = glyph
    return text.ljust(w)[:w]


class AgentsView(Widget, can_focus=True):
    """Arrows move a cursor over the agents (as in the tasks grid, as k9s hands expect):
    enter / d describe the call the selected agent makes now, c cancels its task."""

    DEFAULT_CSS = "AgentsView { height: 1fr; }"
    COMPONENT_CLASSES = {f"cell--{s}" for s in GLYPHS} | {"agents--idle",
                                                               "agents--header",
                                                               "cell--cursor"}
    BINDINGS = [*CURSOR_BINDINGS]

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.slots: tuple[SlotCell, ...] = ()
        self.now_s = 0.0
        self.working = 0
        self.cursor = 0

    @property
    def selected(self) -> TaskCell | None:
        """The task the selected agent works on now (None: it is idle)."""
        if not self.slots:
            return None
        return self.slots[min(self.cursor, len(self.slots) - 1)].cell

    def _columns(self) -> int:
        return fit(len(self.slots), self.size.width, max(1, self.size.height - 1))[1]

    def action_move(self, dx: int, dy: int) -> None:
        if self.slots:
            self.cursor = max(0, min(len(self.slots) - 1,
                                     self.cursor + dx + dy * self._columns()))
            self.refresh()

    def action_jump(self, to: int) -> None:
        if self.slots:
            self.cursor = to % len(self.slots)
            self.refresh()

    async def action_select(self) -> None:
        # the app describes the selected agent's call (an idle one: the tasks grid's task)
        await self.run_action("app.describe")

    def show(self, snap: Snapshot) -> None:
        self.slots = snap.slots
        self.now_s = snap.elapsed_s
        self.working = sum(1 for s in snap.slots if s.cell is not None)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            head = (f" agents: {self.working} of {len(self.slots)} working"
                    "  ·  v: every task (filter, sort, detail)")
            style = base + self.get_component_rich_style("agents--header", partial=True)
            return Strip([Segment(head[:width], style)]).extend_cell_length(width, base)
        rows = max(1, self.size.height - 1)
        w, cols = fit(len(self.slots), width, rows)
        start = (y - 1) * cols
        row = self.slots[start:start + cols]
        if not row:
            return Strip.blank(width, base)
        hidden = len(self.slots) - rows * cols
        more = ""
        if hidden > 0 and y == rows:  # more agents than cells even at a glyph each
            keep = max(0, cols - 12 // w - 1)  # room for " +NNNN more"
            more = f" +{len(self.slots) - start - keep} more"
            row = row[:keep]
        styles: dict[str, Style] = {
            s: base + self.get_component_rich_style(f"cell--{s}", partial=True)
            for s in GLYPHS}
        idle = base + self.get_component_rich_style("agents--idle", partial=True)
        cursor = (base + self.get_component_rich_style("cell--cursor", partial=True)
                  if self.has_focus else None)
        segments = [Segment(cell_text(s, self.now_s, w),
                            cursor if cursor is not None and start + i == self.cursor else
                            styles.get(s.cell.state, base) if s.cell is not None else idle)
                    for i, s in enumerate(row)]
        if more:
            segments.append(Segment(more, base))
        return Strip(segments).simplify().extend_cell_length(width, base).crop(0, width)

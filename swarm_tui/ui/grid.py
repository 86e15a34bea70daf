"""The agent grid on Textual's Line API: one 2-column cell per agent.

DataTable repaints the whole table on any cell change (~10x the CPU, measured);
here each frame re-renders only the rows whose states changed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from swarm_tui.core.states import TaskState
from swarm_tui.engine.snapshot import TaskCell

# State → glyph: readable without colour (NO_COLOR, monochrome terminals).
GLYPHS: dict[str, str] = {
    TaskState.QUEUED: "·", TaskState.RUNNING: "○", TaskState.STREAMING: "◐",
    TaskState.RETRYING: "↻", TaskState.SUCCEEDED: "●", TaskState.FAILED: "✖",
    TaskState.CANCELLED: "−",
}
CELL_W = 2
# a cursor over cells, in the tasks grid and the agents view alike (one id: one rebinding)
CURSOR_BINDINGS = [
    Binding("up", "move(0, -1)", "Up", show=False),
    Binding("down", "move(0, 1)", "Down", show=False),
    Binding("left", "move(-1, 0)", "Left", show=False),
    Binding("right", "move(1, 0)", "Right", show=False),
    Binding("home", "jump(0)", "First", show=False),
    Binding("end", "jump(-1)", "Last", show=False),
    Binding("enter", "select", "Detail", id="agent.detail"),
]


class TaskGrid(ScrollView, can_focus=True):
    COMPONENT_CLASSES: ClassVar[set[str]] = {f"cell--{s}" for s in GLYPHS} | {
        "cell--cursor"}
    BINDINGS = [
        *CURSOR_BINDINGS,
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
    ]

    class Selected(Message):
        def __init__(self, cell: TaskCell) -> None:
            super().__init__()
            self.cell = cell

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.cells: tuple[TaskCell, ...] = ()
        self.cursor = 0
        self._rows: list[tuple] = []

    # -- geometry ----------------------------------------------------------------------
    @property
    def columns(self) -> int:
        # the scrollbar's column is always reserved: the count must not depend on whether
        # the scrollbar has appeared yet (it flipped 40 → 39 a frame after the first draw)
        return max(1, (self.size.width - 1) // CELL_W)

    def _row_count(self) -> int:
        return -(-len(self.cells) // self.columns) if self.cells else 0

    def on_resize(self) -> None:
        self._rows = []
        self.virtual_size = Size(self.columns * CELL_W, self._row_count())
        self.refresh()

    # -- data ---------------------------------------------------------------------------
    def update_cells(self, cells: tuple[TaskCell, ...]) -> None:
        """Refresh only the visible rows whose states (or the cursor) changed."""
        self.cells = cells
        if self.cursor >= len(cells):
            self.cursor = max(0, len(cells) - 1)
        cols = self.columns
        n_rows = self._row_count()
        if self.virtual_size.height != n_rows or self.virtual_size.width != cols * CELL_W:
            self.virtual_size = Size(cols * CELL_W, n_rows)
            self._rows = []
        top = self.scroll_offset.y
        height = max(1, self.size.height)
        rows = []
        for r in range(top, min(n_rows, top + height)):
            sig: tuple[str | int, ...] = tuple(c.state for c in cells[r * cols:(r + 1) * cols])
            if r * cols <= self.cursor < (r + 1) * cols:
                sig += (self.cursor - r * cols,)
            rows.append((r, sig))
        if len(rows) != len(self._rows) or (rows and self._rows and rows[0][0] != self._rows[0][0]):
            self.refresh()
        else:
            for old, new in zip(self._rows, rows, strict=True):
                if old != new:
                    # ScrollView.refresh_line takes the *virtual* row (it subtracts the
                    # scroll offset): passing the on-screen index froze a scrolled grid
                    self.refresh_line(new[0])
        self._rows = rows

    @property
    def selected(self) -> TaskCell | None:
        return self.cells[self.cursor] if self.cells else None

    # -- rendering ----------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        row = self.scroll_offset.y + y
        cols = self.columns
        start = row * cols
        if start >= len(self.cells):
            return Strip.blank(self.size.width, self.rich_style)
        base = self.rich_style
        styles: dict[str, Style] = {
            s: base + self.get_component_rich_style(f"cell--{s}", partial=True)
            for s in GLYPHS}
        cursor = base + self.get_component_rich_style("cell--cursor", partial=True)
        segments = []
        for i, cell in enumerate(self.cells[start:start + cols]):
            style: Style = styles.get(cell.state, base)
            glyph = GLYPHS.get(cell.state, "?")
            if start + i == self.cursor and self.has_focus:
                segments.append(Segment(glyph, style + cursor))
                segments.append(Segment("◂", cursor))
            else:
                segments.append(Segment(glyph + " ", style))
        return Strip(segments).extend_cell_length(self.size.width, base).crop(0, self.size.width)

    # -- actions ------------------------------------------------------------------------
    def _set_cursor(self, index: int) -> None:
        if not self.cells:
            return
        self.cursor = max(0, min(len(self.cells) - 1, index))
        row = self.cursor // self.columns
        self.scroll_to_region_row(row)
        self.update_cells(self.cells)

    def scroll_to_region_row(self, row: int) -> None:
        top = self.scroll_offset.y
        height = max(1, self.size.height)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_move(self, dx: int, dy: int) -> None:
        self._set_cursor(self.cursor + dx + dy * self.columns)

    def action_page(self, direction: int) -> None:
        self._set_cursor(self.cursor + direction * self.columns * max(1, self.size.height))

    def action_jump(self, where: int) -> None:
        self._set_cursor(0 if where == 0 else len(self.cells) - 1)

    def next_in_state(self, state: str) -> bool:
        """Move the cursor to the next cell in `state` after it (wrapping); False: none."""
        n = len(self.cells)
        for step in range(1, n + 1):
            i = (self.cursor + step) % n
            if self.cells[i].state == state:
                self._set_cursor(i)
                return True
        return False

    def action_select(self) -> None:
        if self.selected is not None:
            self.post_message(self.Selected(self.selected))

    def on_focus(self) -> None:
        self._rows = []
        self.refresh()

    def on_blur(self) -> None:
        self._rows = []
        self.refresh()

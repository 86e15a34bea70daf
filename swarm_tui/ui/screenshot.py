"""The console at one moment, as an SVG file (Textual's own screenshot), headless: no
terminal needed — `swarm-tui replay RUN --at T --screenshot FILE.svg` (issue 35)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swarm_tui.errors import UserError
from swarm_tui.report.history import written_to
from swarm_tui.ui.app import SwarmApp


class _Shot(SwarmApp):
    def __init__(self, target: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self._target: Path | None = target  # None once its saving is scheduled
        self.shot: str | None = None
        self.failure: UserError | None = None  # the file could not be written

    async def tick(self) -> None:
        await super().tick()
        if self._target is not None and self.snapshot is not None:
            # saved after the refresh that paints this snapshot (not after a fixed wait)
            target, self._target = self._target, None
            self.call_after_refresh(self._save, target)

    def _save(self, target: Path, tries: int = 100, last: str | None = None) -> None:
        # saved once two frames 50 ms apart show the same characters: the footer's keys
        # (they come by a signal) and the log's scroll land a refresh or more after the
        # snapshot's — a picture taken at once missed rows now and then
        drawn = self._drawn()
        if tries and drawn != last:
            self.set_timer(0.05, lambda: self._save(target, tries - 1, drawn))
            return
        try:  # 0600, as an export: it shows the operator's data
            with written_to(str(target), "--screenshot") as out:
                out.write(self.export_screenshot())
            self.shot = str(target)
        except UserError as e:  # raised here, Textual would print its traceback panel
            self.failure = e
        except OSError as e:  # a pipe whose reader left
            self.failure = UserError(f"--screenshot {target}: cannot write ({e.strerror})")
        self.exit()

    def _drawn(self) -> str:
        try:
            return "\n".join("".join(seg.text for seg in strip)
                             for strip in self.screen._compositor.render_strips())
        except RuntimeError:  # read mid screen change
            return ""


def screenshot(target: Path, size: tuple[int, int], **kw: Any) -> tuple[str | None, Any]:
    """Run the console headless until its first snapshot is drawn; save it to `target`.
    Returns the file written (None: nothing was drawn) and the snapshot shown."""
    app = _Shot(target.resolve(), **kw)
    app.run(headless=True, size=size)
    if app.failure is not None:
        raise app.failure
    return app.shot, app.snapshot

"""The console at one moment, as an SVG file (Textual's own screenshot), headless: no
terminal needed — `swarm-tui replay RUN --at T --screenshot FILE.svg` (issue 35)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swarm_tui.ui.app import SwarmApp


class _Shot(SwarmApp):
    def __init__(self, target: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self._target = target
        self.shot: str | None = None

    async def tick(self) -> None:
        await super().tick()
        if self.shot is None and self.snapshot is not None:
            await self._settle()  # the frame with the snapshot in it
            self.shot = self.save_screenshot(self._target.name, str(self._target.parent))
            self.exit()

    async def _settle(self) -> None:
        import asyncio

        await asyncio.sleep(0.3)  # the grid and log lay out over a frame or two


def screenshot(target: Path, size: tuple[int, int], **kw: Any) -> tuple[str | None, Any]:
    """Run the console headless until its first snapshot is drawn; save it to `target`.
    Returns the file written (None: nothing was drawn) and the snapshot shown."""
    app = _Shot(target.resolve(), **kw)
    app.run(headless=True, size=size)
    return app.shot, app.snapshot

"""Where the console's snapshots come from: a live run (`live`), or the store (`stored`:
watch another process's run, replay a finished one) — both behind `base.RunSource`."""

from swarm_tui.run_sources.base import RunSource, TaskDetail
from swarm_tui.run_sources.live import LiveSource
from swarm_tui.run_sources.stored import StoreSource

__all__ = ["LiveSource", "RunSource", "StoreSource", "TaskDetail"]

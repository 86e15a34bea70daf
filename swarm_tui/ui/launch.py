"""The console's start and its end: the theme (the flag, else the gateway's), the user
themes (a bad one is skipped and said), the collector tuned, the app run; what the run
source reports at the end goes back to the command line, which owns the exit codes
(cli/exits.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swarm_tui.errors import UserError

if TYPE_CHECKING:
    from swarm_tui.run.stored_run import Outcome
    from swarm_tui.settings.loader import LoadedConfig
    from swarm_tui.settings.sections import CanaryConfig


@dataclass(frozen=True)
class ConsoleEnd:
    code: int | None            # the console's own exit (quit, hang-up, interrupt)
    failed: bool                # Textual itself failed (it printed why)
    outcome: Outcome | None     # the run the console executed, when it did


def run_console(cfg: LoadedConfig, *, gateway: str | None, readonly: bool,
                canary: CanaryConfig | None, **kw: Any) -> ConsoleEnd:
    """`canary`: what the canary panel shows; `kw`: the app's run source or how to start
    one (`source`, `start_source`, `db_target`)."""
    from swarm_tui.core.terminal import console_refusal
    from swarm_tui.runtime import tune_gc
    from swarm_tui.ui.app import SwarmApp
    from swarm_tui.ui.themes import load_themes_reporting

    ui = cfg.settings.ui
    theme = ui.theme  # `--theme` is the config's top layer
    if theme is None and not cfg.simulated_only:
        gw = cfg.settings.gateways.get(gateway or cfg.settings.default_gateway or "")
        theme = gw.theme if gw else None
    known, problems = load_themes_reporting()
    for line in problems:
        print(f"swarm-tui: warning: {line}", file=sys.stderr)
    if theme is not None and theme not in known:
        raise UserError(f"theme {theme}: unknown (known: {', '.join(sorted(known))})")
    refusal = console_refusal()
    if refusal is not None:
        raise UserError(refusal)
    tune_gc()  # the console's key presses wait on the collector's walks otherwise
    app = SwarmApp(refresh_s=ui.refresh_s, theme=theme, keymap=ui.keys, view=ui.view,
                   readonly=readonly, canary=canary, **kw)
    code = app.run()
    failed = code is None and app.return_code not in (None, 0)
    source = kw.get("source") or app.source
    err = getattr(source, "error", None)
    if err and not failed:
        raise UserError(err)
    return ConsoleEnd(code, failed, getattr(source, "outcome", None))

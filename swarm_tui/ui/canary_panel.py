"""The canary panel: stage ladder and bake timer, baseline vs candidate, gates, history.

Reads a CanaryView (from the live run's controller, or from the store) once a
second; every action asks for confirmation and a reason, and is refused in
read-only consoles and in states where it makes no sense.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from swarm_tui.canary import state as st
from swarm_tui.canary.controller import CanaryView
from swarm_tui.core import fmt
from swarm_tui.core.fmt import shown
from swarm_tui.errors import UserError
from swarm_tui.report import canary as report
from swarm_tui.settings.sections import SIM_GATEWAY
from swarm_tui.ui.screens import Field, FormScreen

RESULT_STYLE = {"pass": "bold $success", "fail": "bold $error", "inconclusive": "bold $warning"}
STATUS_STYLE = {st.PROGRESSING: "$primary", st.PAUSED: "$warning", st.ABORTED: "$error",
                st.COMPLETE: "$success"}
QUESTIONS = {
    st.PROMOTE: "Promote the candidate to the next stage ({next}% of users)?",
    st.PROMOTE_FULL: "Promote the candidate to 100% of users now, skipping the stages?",
    st.PAUSE: "Pause the canary at {pct}%? Auto mode stops promoting and aborting.",
    st.RESUME: "Resume the canary at {pct}%? The bake timer starts again.",
    st.ABORT: "Abort: send every user back to the baseline (0%)?",
    st.SET: "Set the candidate's share of users (1-100 %):",
    st.RETRY: "Retry the canary from its first stage ({first}%)?",
}


def bake_bar(view: CanaryView, width: int = 20, now: float | None = None) -> str:
    bake = view.bake_s()
    done = min(1.0, view.baked_s(now) / bake) if bake > 0 else 1.0
    fill = round(done * width)
    return "█" * fill + "░" * (width - fill)


def panel_text(view: CanaryView, *, window: bool = False, now: float | None = None,
               styles: dict[str, str] | None = None) -> Text:
    """The whole panel as styled text (`styles` maps a role to a Rich style)."""
    styles = styles or {}
    s, c = view.state, view.cfg
    out = Text()
    out.append(f"canary {c.name}", style="bold")
    out.append(f"  mode {c.mode}  ")
    out.append(s.status.upper(), style=styles.get(s.status, "bold"))
    out.append(f"  {s.pct}% of users on {c.candidate}\n")
    out.append(f"stages {report.ladder(s, c.stages)}\n")
    now = (view.as_of or time.time()) if now is None else now
    if not view.started:  # no timer runs for a canary that never started
        out.append("not started: no run has used this canary yet\n")
        if c.baseline == SIM_GATEWAY:
            out.append("the simulator's demo canary starts with "
                       "`swarm-tui run --demo --canary-demo`\n")
    elif s.status == st.PROGRESSING:
        out.append(f"bake   {bake_bar(view, now=now)} {fmt.duration(view.baked_s(now))} / "
                   f"{fmt.duration(view.bake_s())}")
        if s.passing_since is not None:
            out.append(f"   passing {fmt.duration(now - s.passing_since)}")
        if s.failures:
            out.append(f"   failed {s.failures}/{c.failure_limit}", style=styles.get("fail"))
        out.append("\n")
    else:
        out.append(f"held since {time.strftime('%H:%M:%S', time.localtime(s.updated_at))}\n")
    a = view.analysis
    if a is None:
        out.append("\n(no figures yet)\n")
    else:
        figs = a.window if window else a.stage
        title = f"last {fmt.duration(a.window_s)}" if window else "this stage"
        out.append(f"\n{title} (w: {'stage' if window else 'window'})\n", style="bold")
        out.append(report.figure_table(figs) + "\n")
        out.append(f"\ngates: {a.overall}\n", style=styles.get(a.overall, "bold"))
        for v in a.verdicts:
            out.append(f"  {v.gate:<10}")
            out.append(f"{report.MARK[v.result]:<15}", style=styles.get(v.result, ""))
            out.append(f" {v.detail}\n")
    if view.error:
        out.append(f"\n{view.error}\n", style=styles.get("fail"))
    out.append("\nhistory (newest first)\n", style="bold")
    for h in view.history[:8]:
        out.append(report.history_line(h) + "\n")
    if not view.history:
        out.append("no actions yet\n")
    return out


def action_form(action: str, question: str) -> FormScreen:
    """Confirm one action: a percentage for `set`, and a reason for the audit log."""
    fields = [Field("canary-pct", "percentage, e.g. 25")] if action == st.SET else []
    fields.append(Field("canary-reason", "reason (kept in the audit log)"))
    return FormScreen(question, fields, action)


class CanaryScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="canary.back"),
        Binding("p", "act('promote')", "Promote", id="canary.promote"),
        Binding("f", "act('promote-full')", "Full", id="canary.promote_full"),
        Binding("z", "act('pause')", "Pause", id="canary.pause"),
        Binding("r", "act('resume')", "Resume", id="canary.resume"),
        Binding("a", "act('abort')", "Abort", id="canary.abort"),
        Binding("s", "act('set')", "Set %", id="canary.set"),
        Binding("t", "act('retry')", "Retry", id="canary.retry"),
        Binding("w", "toggle_window", "Stage/window", id="canary.window"),
    ]

    def __init__(self, fetch: Callable[[], Awaitable[CanaryView | None]],
                 act: Callable[[str, str | None, str | None], Awaitable[None]],
                 readonly: bool, refresh_s: float = 1.0,
                 in_use: Callable[[], bool] = lambda: True) -> None:
        super().__init__()
        self.fetch = fetch
        self.act = act
        self.in_use = in_use  # a run in this console routes by this canary now
        self.readonly = readonly
        self.refresh_s = refresh_s
        self.view: CanaryView | None = None
        self.window = False

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="canary"):
            yield Static("loading…", id="canary-text")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(self.refresh_s, self.reload)
        self.call_later(self.reload)

    def _styles(self) -> dict[str, str]:
        vars_ = self.app.get_css_variables()
        def pick(spec: str) -> str:
            parts = [vars_.get(p[1:], p) if p.startswith("$") else p for p in spec.split()]
            return " ".join(parts)
        return {k: pick(v) for k, v in {**RESULT_STYLE, **STATUS_STYLE}.items()}

    async def reload(self) -> None:
        try:
            self.view = await self.fetch()
        except UserError as e:
            self.query_one("#canary-text", Static).update(Text(shown(str(e))))  # not markup
            return
        self.render_view()

    def render_view(self, now: float | None = None) -> None:
        if self.view is None:
            return
        text = panel_text(self.view, window=self.window, now=now, styles=self._styles())
        if self.view.as_of is not None:
            when = time.strftime("%H:%M:%S", time.localtime(self.view.as_of))
            text.append(f"\nas it was at {when}: a replay (nothing acts on it)\n",
                        style="dim")
        elif not self.in_use():
            text.append("\nno run in this console routes by this canary: what you see is "
                        "its stored state (a run elsewhere may use it)\n", style="dim")
        self.query_one("#canary-text", Static).update(text)
        if self._offered != self._offer():
            self._offered = self._offer()
            self.refresh_bindings()  # the footer offers what this state allows

    _offered: tuple[bool, str | None] | None = None

    def _offer(self) -> tuple[bool, str | None]:
        return self.readonly, None if self.view is None else self.view.state.status

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Footer and palette offer only the moves this console may make in this state
        (a read-only console offers none); a hidden key still answers why, in words."""
        if action != "act":
            return True
        if self.readonly or self.view is None:
            return False
        return self.view.state.status in st.ALLOWED[str(parameters[0])]

    def on_key(self, event: events.Key) -> None:
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.action.startswith("act(") and \
                    event.key in b.key.split(","):
                action = b.action[5:-2]
                if self.check_action("act", (action,)) is False:
                    event.stop()
                    self.action_act(action)  # says why it cannot
                return

    def action_toggle_window(self) -> None:
        self.window = not self.window
        self.render_view()

    def action_act(self, action: str) -> None:
        view = self.view
        if self.readonly:
            self.notify(f"canary {action}: read-only console", severity="warning")
            return
        if view is None:
            return
        s = view.state
        if s.status not in st.ALLOWED[action]:
            can = ", ".join(st.allowed_actions(s.status)) or "nothing"
            self.notify(f"cannot {action} while {s.status} (allowed: {can})",
                        severity="warning")
            return
        question = QUESTIONS[action].format(pct=s.pct, next=s.next_pct(view.cfg.stages) or 100,
                                            first=view.cfg.stages[0])
        if not self.in_use():
            question += ("\nNo run in this console routes by this canary: this changes its "
                         "stored state, which the next run using it starts from (a run "
                         "elsewhere picks it up within a second).")

        async def answer(result: dict[str, str] | None) -> None:
            if result is None:
                return
            pct, reason = result.get("canary-pct", ""), result["canary-reason"]
            try:
                await self.act(action, pct or None, reason or None)
            except UserError as e:
                self.notify(str(e), severity="error")
                return
            self.notify(f"canary {action} done")
            await self.reload()

        self.app.push_screen(action_form(action, question), answer)

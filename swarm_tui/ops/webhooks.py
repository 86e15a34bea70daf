"""Alert delivery to webhooks in the pager's own format: generic JSON, Slack's `{"text"}`,
PagerDuty Events API v2 (trigger / resolve by dedup_key), Alertmanager's `/api/v2/alerts`
(startsAt / endsAt). A condition that clears sends its resolve.

Each webhook has its own queue and worker task on the engine's loop: its alerts arrive in
the order they were raised, and a receiver that is down retries with backoff without
holding up the other webhooks — or the engine. Each outcome is recorded in the run's
events through `record`. A webhook's URL is a credential: it appears nowhere —
deliveries are named by the webhook's `name`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from typing import Any

from swarm_tui.core.moments import moment_iso as _iso  # the page's time is its replay's
from swarm_tui.gateway.tls import aiohttp, load_deferred
from swarm_tui.gateway.wire import env_proxy
from swarm_tui.ops.alerts import Alert
from swarm_tui.settings.run_sections import AlertsConfig, WebhookConfig

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
RETRY_AFTER_CAP_S = 30.0
ICON = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":white_check_mark:"}


def payload(hook: WebhookConfig, alert: Alert,
            console_url: str | None = None) -> dict[str, Any] | list[dict[str, Any]]:
    """The alert in the receiver's own format; a cleared condition as its resolve. Each
    carries the command that opens its moment and, with `alerts.console_url`, a link to
    the same moment in the served console."""
    at = _iso(alert.at)
    link = alert.link(console_url)
    if hook.format == "slack":
        mark = ":white_check_mark: RESOLVED" if alert.resolved else ICON[alert.severity]
        opened = f" <{link}|open the moment>" if link else ""
        return {"text": f"{mark} *swarm-tui* [{alert.severity}] run "
                        f"`{alert.run_id}`: {alert.summary} — `{alert.replay}`{opened}"}
    if hook.format == "pagerduty":
        return _pagerduty(hook, alert, at, link)
    if hook.format == "alertmanager":
        return [_alertmanager(alert, link)]
    body = {"source": "swarm-tui", "kind": str(alert.kind), "severity": alert.severity,
            "status": "resolved" if alert.resolved else "firing", "key": alert.key,
            "summary": alert.summary, "run_id": alert.run_id, "at": at,
            "host": socket.gethostname(), "details": alert.details, "replay": alert.replay}
    if link:
        body["replay_url"] = link
    return body


def _pagerduty(hook: WebhookConfig, alert: Alert, at: str, link: str | None) -> dict[str, Any]:
    """Events API v2: trigger, and resolve by the same dedup_key."""
    body: dict[str, Any] = {"routing_key": hook.resolved_routing_key(),
                            "event_action": "resolve" if alert.resolved else "trigger",
                            "dedup_key": alert.key}
    if not alert.resolved:
        body["payload"] = {
            "summary": alert.summary[:1024], "source": socket.gethostname(),
            "severity": alert.severity, "timestamp": at, "component": "swarm-tui",
            "group": alert.run_id, "class": str(alert.kind),
            "custom_details": {"run_id": alert.run_id, "replay": alert.replay,
                               **alert.details}}
        if link:  # shown on the incident as a link
            body["links"] = [{"href": link, "text": "swarm-tui: the console at this moment"}]
    return body


def _alertmanager(alert: Alert, link: str | None) -> dict[str, Any]:
    """One postable alert (`/api/v2/alerts`): the label set is the condition's identity;
    a resolve is the same labels with endsAt now."""
    labels = {"alertname": f"swarm_tui_{alert.kind}", "severity": alert.severity,
              "run_id": alert.run_id, "source": "swarm-tui"}
    if alert.scope:
        labels["scope"] = alert.scope
    annotations = {"summary": alert.summary, "replay": alert.replay,
                   **{k: json.dumps(v) if not isinstance(v, str) else v
                      for k, v in alert.details.items()}}
    out: dict[str, Any] = {"labels": labels, "annotations": annotations,
                           "startsAt": _iso(alert.started_at or alert.at)}
    if link:  # "the entity that caused the alert": the console at its moment
        out["generatorURL"] = link
    if alert.resolved:
        out["endsAt"] = _iso(alert.at)
    return out


class AlertDelivery:
    def __init__(self, cfg: AlertsConfig, record: Callable[[str], None],
                 counted: Callable[[str, bool], None] | None = None) -> None:
        self.cfg = cfg
        self.record = record      # one line into the run's events per delivery outcome
        self.counted = counted    # the metrics' delivery counter
        self._session: aiohttp.ClientSession | None = None
        # each receiver's proxy, looked up once (the lookup reads ~/.netrc)
        self._proxies: dict[str, tuple[str | None, aiohttp.BasicAuth | None]] = {}
        self._queues: dict[str, asyncio.Queue[Alert]] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._outstanding = 0  # queued or being delivered
        self._closed = False
        self.delivered = 0
        self.failed = 0
        if any((h.resolved_url() or "").startswith("https:") for h in cfg.webhooks):
            load_deferred()  # now, not on the engine's loop at the first alert (tls.py)

    def hooks_for(self, alert: Alert) -> list[WebhookConfig]:
        return [h for h in self.cfg.webhooks if alert.kind in h.events]

    def send(self, alert: Alert) -> None:
        """Never blocks: each webhook's worker delivers on this (the engine's) loop."""
        for hook in self.hooks_for(alert):
            if self._closed:  # its workers are gone: on record, never silently queued
                self._outcome(hook, alert, False, "raised after the run's alerts closed")
                continue
            queue = self._queues.get(hook.name)
            if queue is None:
                queue = self._queues[hook.name] = asyncio.Queue()
                self._workers.append(asyncio.get_running_loop().create_task(
                    self._worker(hook, queue)))
            queue.put_nowait(alert)
            self._outstanding += 1

    async def _worker(self, hook: WebhookConfig, queue: asyncio.Queue[Alert]) -> None:
        while True:
            alert = await queue.get()
            try:
                await self._deliver(hook, alert)
            finally:
                self._outstanding -= 1
                queue.task_done()

    async def _deliver(self, hook: WebhookConfig, alert: Alert) -> None:
        url = hook.resolved_url()
        if not url:
            self._outcome(hook, alert, False, f"${hook.url_env} is not set")
            return
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.cfg.timeout_s))
        body = json.dumps(payload(hook, alert, self.cfg.console_url)).encode()
        if url not in self._proxies:  # a pager outside the bastion: through its proxy
            self._proxies[url] = env_proxy(url)
        proxy, proxy_auth = self._proxies[url]
        why = ""
        for attempt in range(1, self.cfg.attempts + 1):
            wait = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
            try:
                async with self._session.post(
                        url, data=body, headers={"Content-Type": "application/json"},
                        proxy=proxy, proxy_auth=proxy_auth) as resp:
                    if 200 <= resp.status < 300:
                        self._outcome(hook, alert, True,
                                      f"HTTP {resp.status}, attempt {attempt}")
                        return
                    why = (f"the proxy refused it: HTTP {resp.status}" if resp.status == 407
                           else f"HTTP {resp.status}")
                    if resp.status < 500 and resp.status not in (408, 429):
                        break  # the receiver refuses this payload: retrying will not help
                    with contextlib.suppress(ValueError, TypeError):
                        wait = min(RETRY_AFTER_CAP_S, float(resp.headers["Retry-After"]))
            except aiohttp.ClientHttpProxyError as e:  # its CONNECT (an https receiver)
                why = f"the proxy refused it: HTTP {e.status} {e.message}".rstrip()
                if e.status < 500:
                    break  # a password it wants, a host it forbids: no retry brings them
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                why = _reason(e)
            if attempt < self.cfg.attempts:
                await asyncio.sleep(wait)
        self._outcome(hook, alert, False, f"{why} after {attempt} attempt"
                      f"{'s' if attempt > 1 else ''}; the run goes on")

    def _outcome(self, hook: WebhookConfig, alert: Alert, ok: bool, how: str) -> None:
        if ok:
            self.delivered += 1
        else:
            self.failed += 1
        if self.counted is not None:
            self.counted(str(alert.kind), ok)
        self.record(f"alert {alert.kind}{' resolved' if alert.resolved else ''} → {hook.name}: "
                    f"{'delivered' if ok else 'NOT delivered'} ({how})")

    async def close(self) -> int:
        """Give the queued deliveries up to `drain_s`, then give up on them. Returns how
        many were abandoned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.drain_s
        # an alert raised while this drains (a canary move landing as the run ends) is
        # drained too, its hook's queue new or not
        while self._outstanding and (left := deadline - loop.time()) > 0:
            drained = asyncio.gather(*(q.join() for q in self._queues.values()))
            with contextlib.suppress(TimeoutError):  # (not wait_for: see canary/controller)
                async with asyncio.timeout(left):
                    await drained
        self._closed = True
        abandoned = self._outstanding  # still queued, plus the one each worker retries
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if abandoned:
            self.record(f"alerts: {abandoned} deliveries abandoned at the end of the run "
                        f"(still retrying after {self.cfg.drain_s:.0f} s)")
        if self._session is not None:
            await self._session.close()
            self._session = None
        return abandoned


def _reason(e: BaseException) -> str:
    """A short cause without the URL (aiohttp puts the host and path in its messages)."""
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"cannot connect ({e.os_error.strerror or type(e.os_error).__name__})"
    return type(e).__name__

"""A scrape that reads run_ended 1 reads final figures, however it interleaves with the
run's end (the scrape thread collects while the engine counts)."""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from swarm_tui.ops.metrics import RunMetrics


def _scrape_with_the_end_between(m: RunMetrics, after: int) -> dict[str, float]:
    """One scrape of `m` in which the run's last task is counted and the run ends after
    the scrape has collected `after` metric families."""
    registry: CollectorRegistry = m.registry
    seen: dict[str, float] = {}
    for i, family in enumerate(registry.collect()):
        if i == after:
            m.count_task("gw", "m", "baseline", "succeeded", 1, 1, 0.01)
            m.end()
        for sample in family.samples:
            if sample.name in ("swarm_tui_tasks_total", "swarm_tui_run_ended"):
                seen[sample.name] = seen.get(sample.name, 0) + sample.value
    return seen


def test_a_scrape_that_reads_the_end_reads_every_task():
    families = len(list(RunMetrics("r", True).registry.collect()))
    for after in range(families):  # the end at every point of a scrape
        m = RunMetrics("r", True)
        for _ in range(1499):
            m.count_task("gw", "m", "baseline", "succeeded", 1, 1, 0.01)
        seen = _scrape_with_the_end_between(m, after)
        if seen.get("swarm_tui_run_ended") == 1:
            assert seen["swarm_tui_tasks_total"] == 1500, after
        assert m.final_scraped.done.is_set() is False or seen.get(
            "swarm_tui_run_ended") == 1  # the linger ends only on a final scrape

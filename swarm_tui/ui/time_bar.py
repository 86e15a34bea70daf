"""A replay's time bar (issue 35): where the moment shown sits in the run, the notable
moments on it, the mark to compare against, and how fast it plays — one line."""

from __future__ import annotations

from collections.abc import Sequence

SPEEDS = (1, 10, 60)  # space: paused → 1× → 10× → 60× → paused


def next_speed(speed: int | None) -> int | None:
    if speed is None:
        return SPEEDS[0]
    i = SPEEDS.index(speed) + 1 if speed in SPEEDS else len(SPEEDS)
    return SPEEDS[i] if i < len(SPEEDS) else None


def time_bar_text(at: float, span: tuple[float, float], moments: Sequence[float],
                  width: int, speed: int | None = None, mark: float | None = None) -> str:
    """`▶10× ├──◆───●──M─◆──┤ +12.0s/30.5s`: ● the moment shown, ◆ notable moments,
    M the mark (`m`), in `width` columns."""
    start, end = span
    length = max(end - start, 1e-9)
    state = "‖ " if speed is None else f"▶{speed}× "
    clock = f" +{at - start:.1f}s/{length:.1f}s"
    inner = max(8, width - len(state) - len(clock) - 2)
    cells = ["─"] * inner

    def col(t: float) -> int:
        return min(inner - 1, max(0, round((t - start) / length * (inner - 1))))

    for t in moments:
        if start <= t <= end:
            cells[col(t)] = "◆"
    if mark is not None:
        cells[col(mark)] = "M"
    cells[col(at)] = "●"
    return f"{state}├{''.join(cells)}┤{clock}"[:width]

"""The moment a page or a moment's list gives to paste opens at or just after its event."""

from __future__ import annotations

from datetime import datetime

import pytest

from swarm_tui.core.moments import AT, moment_iso, replay_command


@pytest.mark.parametrize("t", [1796499155.2930994, 1796499155.0, 1796499155.9996,
                               1796499159.999999, 1764946800.0004])
def test_a_moment_is_written_to_the_millisecond_rounded_up(t):
    text = moment_iso(t)
    assert AT.fullmatch(text)  # what `serve`'s /at/RUN/TIME takes
    back = datetime.fromisoformat(text).timestamp()  # as `replay --at` reads it
    assert t <= back < t + 0.001 + 1e-6, (t, text, back)


def test_two_events_of_one_second_are_two_commands():
    a, b = replay_command("r1", 1796499155.21), replay_command("r1", 1796499155.43)
    assert a != b and a.endswith("--at 2026-12-05T19:32:35.210Z")

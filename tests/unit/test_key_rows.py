"""A key used by several processes of one run (a run's workers) reads as one row."""

from __future__ import annotations

from swarm_tui.store.reads import _one_row_per_key


def test_a_keys_rows_from_several_workers_read_as_one():
    # (gateway, fingerprint, label, source, state, cooling_until, reason, in_flight, calls,
    #  rate_limited, errors, tokens_in, tokens_out, last_used, updated_at)
    a = ("gw", "fp1", "main", "env:K", "active", None, None, 3, 10, 1, 0, 100, 200, 50.0, 99.0)
    b = ("gw", "fp1", "main", "env:K", "disabled", 70.0, "401 from the gateway", 2, 5, 0, 1,
         50, 80, 60.0, 100.0)
    gone = ("gw", "fp1", "main", "env:K", "active", None, None, 7, 4, 0, 0, 40, 40, 10.0,
            20.0)  # a worker killed long ago: its calls count, its in-flight ones do not
    other = ("gw", "fp2", None, "file", "active", None, None, 0, 1, 0, 0, 1, 1, 5.0, 99.0)
    assert _one_row_per_key([a, b, gone, other], 2) == [
        ("gw", "fp1", "main", "env:K", "disabled", 70.0, "401 from the gateway", 5, 19, 1, 1,
         190, 320, 60.0),
        other[:-1]]


def test_a_key_one_worker_has_not_used_yet_reads_as_one():
    """Early in a run of two workers one has a row for a key it has not called with yet
    (last_used NULL): adding up the last-use column with the counters raised TypeError in
    every watcher's snapshot (found on PostgreSQL, where the rows came in that order)."""
    used = ("gw", "fp1", "main", "env:K", "active", None, None, 2, 10, 0, 0, 100, 200, 50.0,
            99.0)
    unused = ("gw", "fp1", "main", "env:K", "active", None, None, 0, 0, 0, 0, 0, 0, None, 99.5)
    expected = ("gw", "fp1", "main", "env:K", "active", None, None, 2, 10, 0, 0, 100, 200, 50.0)
    assert _one_row_per_key([unused, used], 2) == [expected]
    assert _one_row_per_key([used, unused], 2) == [expected]
    never = _one_row_per_key([unused, (*unused[:-1], 98.0)], 2)
    assert never == [(*unused[:-2], None)]

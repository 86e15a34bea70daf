from __future__ import annotations

import pytest

from swarm_tui.errors import UserError
from swarm_tui.workload import demo_tasks, parse_workload


def test_bad_lines_are_reported_with_file_and_line(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text(
        '{"id": "a", "prompt": "hello"}\n'
        "\n"
        '{"id": "b", "prompt": ""}\n'
        "not json\n"
        '{"id": "a", "prompt": "dup"}\n'
        '{"id": 5, "prompt": "x"}\n'
        '{"id": "c", "prompt": "x", "colour": 1}\n'
        "[1, 2]\n"
        '{"id": "d", "prompt": "ok", "user_id": "u1", "max_tokens": 10, "metadata": {"k": 1}}\n'
    )
    tasks, bad = parse_workload(p)
    assert [t.id for t in tasks] == ["a", "d"]
    assert tasks[1].routing_user == "u1" and tasks[0].routing_user == "a"
    got = [str(b) for b in bad]
    assert got[0] == f"{p}:3: prompt: String should have at least 1 character"
    assert got[1].startswith(f"{p}:4: invalid JSON")
    assert got[2] == f"{p}:5: id: duplicate of line 1"
    assert got[3] == f"{p}:6: id: Value error, must be a string"
    assert got[4] == f"{p}:7: colour: unknown field"
    assert got[5] == f"{p}:8: expected a JSON object"


def test_unreadable_workload(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        parse_workload(tmp_path / "none.jsonl")
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match="not UTF-8"):
        parse_workload(p)


def test_demo_has_the_teams_shape():
    tasks = demo_tasks(1000)
    est = [t.prompt_tokens_estimate() for t in tasks]
    mean = sum(est) / len(est)
    assert 650 <= mean <= 820
    assert 0.08 < sum(e > 1000 for e in est) / len(est) < 0.25  # long documents exist
    assert all(t.max_tokens == 1200 for t in tasks)
    assert len({t.id for t in tasks}) == 1000


def test_a_utf8_bom_is_not_part_of_line_one(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"id": "a", "prompt": "hello"}\n{"id": "b", "prompt": "x"}\n')
    tasks, bad = parse_workload(p)
    assert [t.id for t in tasks] == ["a", "b"] and bad == []


@pytest.mark.slow
def test_a_pathologically_nested_line_is_a_bad_line_not_a_crash(tmp_path):
    from tests.conftest import swarm

    p = tmp_path / "w.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    p.write_text('{"id": "a", "prompt": "ok"}\n'
                 f'{{"id": "b", "prompt": "x", "metadata": {{"k": {deep}}}}}\n')
    tasks, bad = parse_workload(p)
    assert [t.id for t in tasks] == ["a"]
    assert [str(b) for b in bad] == [f"{p}:2: invalid JSON: nested too deeply"]
    r = swarm("run", str(p), "--headless", env={"SWARM_TUI_DB": str(tmp_path / "r.db"),
                                                "XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert r.returncode == 2 and f"{p}:2: invalid JSON: nested too deeply" in r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr

"""core/record.py against the stdlib it stands in for: the same class body decorated by
`@record` and by `@dataclass` builds, shows, compares, hashes, refuses and copies alike."""

from __future__ import annotations

import copy as copy_module
import dataclasses
import itertools
import pickle
import re
import sys
import types

import pytest
from pydantic import TypeAdapter, ValidationError

from swarm_tui.core import record as rec
from swarm_tui.core.checks import STRICT, Limits, checked
from swarm_tui.core.plain import as_plain, build

BODY = '''
from __future__ import annotations
from typing import Annotated, ClassVar

class Point:
    """a point"""
    KIND: ClassVar[str] = "point"
    x: int
    y: int = 2
    tags: list[str] = FIELD(default_factory=list)
    secret: str = FIELD(default="", repr=False)

class Labelled(Point):
    """a point with a label"""
    label: str = "p"

class Strict:
    """checked by pydantic"""
    __pydantic_config__ = STRICT
    n: Annotated[int, Limits(ge=1)] = 1
    inner: Inner = FIELD(default_factory=lambda: Inner())

    def __post_init__(self) -> None:
        if self.n == 13:
            raise ValueError("unlucky")

class Inner:
    """nested"""
    m: float = 0.5
'''


def _both(options: dict[str, object]) -> tuple[dict[str, type], dict[str, type]]:
    """BODY's classes decorated each way, in a module of their own (hints resolve there)."""
    given = ", ".join(f"{k}={v!r}" for k, v in options.items())
    built = []
    for deco, fld in ((rec.record, rec.field), (dataclasses.dataclass, dataclasses.field)):
        module = types.ModuleType(f"_record_case_{next(_CASES)}")
        sys.modules[module.__name__] = module
        module.__dict__.update(FIELD=fld, STRICT=STRICT, Limits=Limits, DECO=deco)
        exec(BODY.replace("\nclass ", f"\n@DECO({given})\nclass "), module.__dict__)
        built.append({k: v for k, v in module.__dict__.items()
                      if isinstance(v, type) and v.__module__ == module.__name__})
    return built[0], built[1]


_CASES = itertools.count()


def _same_hash(one: object, other: object) -> object:
    try:
        return hash(one) == hash(other)
    except TypeError as e:  # (a list field is unhashable either way)
        return type(e)


@pytest.mark.parametrize("options", [{}, {"kw_only": True}, {"frozen": True},
                                     {"slots": True}, {"frozen": True, "slots": True},
                                     {"eq": False}], ids=str)
def test_a_record_behaves_as_the_same_dataclass(options):
    ours, std = _both(options)
    kw = options.get("kw_only", False)
    for name in ("Point", "Labelled"):
        r, d = ours[name], std[name]
        args = {"x": 1, "tags": ["a"], "secret": "s3cret"}
        a, b = r(**args), d(**args)
        assert repr(a) == repr(b)
        assert "s3cret" not in repr(a)
        assert [f.name for f in rec.fields(a)] == [f.name for f in dataclasses.fields(b)]
        assert (a == r(**args)) == (b == d(**args))
        assert (a == r(**{**args, "x": 5})) == (b == d(**{**args, "x": 5}))
        assert r(x=1).tags is not r(x=1).tags  # a factory per object
        assert type(a).KIND == "point"
        assert (type(a).__hash__ is None) == (type(b).__hash__ is None)
        if type(a).__hash__ is not None:
            assert _same_hash(a, r(**args)) == _same_hash(b, d(**args))
        assert hasattr(a, "__dict__") == hasattr(b, "__dict__")
        for bad in ({}, {"x": 1, "nope": 2}):  # missing, unknown: TypeError both
            with pytest.raises(TypeError):
                r(**bad)
            with pytest.raises(TypeError):
                d(**bad)
        if kw:
            with pytest.raises(TypeError):
                r(1)
            with pytest.raises(TypeError):
                d(1)
        else:
            assert rec.fields(r(1, 3)) and (r(1, 3).x, r(1, 3).y) == (1, 3)
            with pytest.raises(TypeError):
                r(1, x=1)
        if options.get("frozen"):
            with pytest.raises(AttributeError):
                a.x = 9
            with pytest.raises(AttributeError):
                b.x = 9
        else:
            a.x = 9
            assert a.x == 9
        for again in (copy_module.copy(a), copy_module.deepcopy(a),
                      pickle.loads(pickle.dumps(a))):
            assert repr(again) == repr(a) and type(again) is type(a)
            assert (again == a) == (copy_module.copy(b) == b)
        copy = rec.replace(a, y=7)
        assert (copy.x, copy.y, copy.tags) == (a.x, 7, a.tags) and copy is not a
        with pytest.raises(TypeError):
            rec.replace(a, nope=1)
    if options.get("frozen"):  # a frozen record of hashable fields is a set member
        inner = ours["Inner"]
        assert len({inner(m=1.0), inner(m=1.0), inner(m=2.0)}) == 2


def test_a_field_without_a_default_after_one_with_is_refused_as_dataclasses_does():
    class Ok:
        a: int = 1

    with pytest.raises(TypeError, match="without a default"):
        rec.record(type("Bad", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1}))
    assert rec.record(kw_only=True)(Ok)().a == 1


def test_post_init_runs_and_its_error_is_the_callers():
    ours, _ = _both({"kw_only": True})
    with pytest.raises(ValueError, match="unlucky"):
        ours["Strict"](n=13)
    assert ours["Strict"](n=2).inner == ours["Inner"]()


def test_pydantic_validates_a_record_made_a_dataclass_with_its_nested_records():
    ours, _ = _both({"kw_only": True})
    strict, inner = ours["Strict"], ours["Inner"]
    got = checked(strict, {"n": 3, "inner": {"m": 1.5}})
    assert got == strict(n=3, inner=inner(m=1.5))  # our __eq__ kept: a record still
    assert dataclasses.is_dataclass(strict) and dataclasses.is_dataclass(inner)
    for bad in ({"n": 0}, {"n": 2, "extra": 1}, {"inner": {"m": "x"}}, {"n": 13}):
        with pytest.raises(ValidationError):
            TypeAdapter(strict).validate_python(bad)
    assert checked(strict, {}).n == 1  # defaults and factories as they were


def test_plain_form_round_trips_through_a_record():
    ours, _ = _both({"kw_only": True})
    obj = ours["Labelled"](x=4, tags=["한국어", "中文"], label="라벨")
    plain = as_plain(obj)
    assert plain == {"x": 4, "y": 2, "tags": ["한국어", "中文"], "secret": "", "label": "라벨"}
    assert build(ours["Labelled"], {**plain, "unknown": 1}) == obj


def test_a_record_with_slots_cannot_be_grafted_and_says_so():
    ours, _ = _both({"slots": True})
    with pytest.raises(TypeError, match="slots"):
        rec.as_dataclass(ours["Point"])


def test_the_plain_forms_hints_are_typings_for_every_record_of_ours():
    """plain.build evaluates each annotation text once per module instead of calling
    typing.get_type_hints: the types must come out the same, for every record class."""
    import importlib
    import pkgutil
    import typing

    import swarm_tui
    from swarm_tui.core.plain import _hints

    checked_classes = 0
    for info in pkgutil.walk_packages(swarm_tui.__path__, "swarm_tui."):
        if info.name.startswith(("swarm_tui.ui", "swarm_tui.__main__")):
            continue  # (Textual's: no record there is built from a plain form)
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == info.name and (
                    rec.is_record(value) or dataclasses.is_dataclass(value)):
                try:
                    expected = typing.get_type_hints(value, include_extras=True)
                except NameError:  # a type imported for type checking only: never built
                    continue
                # (a marker in Annotated is a new object per evaluation: compared by its text)
                assert _text(_hints(value)) == _text(expected), value
                checked_classes += 1
    assert checked_classes >= 60  # the records and the dataclasses of the package


def _text(hints: dict[str, object]) -> dict[str, str]:
    return {k: re.sub(r" at 0x[0-9a-f]+", "", repr(v)) for k, v in hints.items()}


def test_a_field_is_taken_without_a_walk_only_when_nothing_in_it_needs_building():
    from pathlib import Path
    from typing import Annotated, Literal

    from swarm_tui.core.plain import _as_is
    from swarm_tui.core.states import RunStatus
    from swarm_tui.core.summary import Percentiles, RunSummary, Stats

    for hint in (int, float | None, str, dict[str, int], list[str], Literal["a", "b"],
                 Annotated[int, Limits(ge=1)], tuple[int, ...]):
        assert _as_is(hint), hint
    for hint in (Stats, Stats | None, dict[str, Stats], list[Percentiles], Path | None,
                 RunStatus, Annotated[list[Path], Limits()], dict[str, list[RunSummary]]):
        assert not _as_is(hint), hint
    summary = build(RunSummary, as_plain(RunSummary(run_id="r", by_model={"m": Stats()})))
    assert isinstance(summary.by_model["m"], Stats)
    assert isinstance(summary.by_model["m"].latency_ms, Percentiles)

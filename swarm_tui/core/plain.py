"""Results as plain records: to JSON, and back from the JSON the store keeps.

Pydantic validates what comes in (config, workload, price files); what our own code
computes (summaries, cost reports, canary analyses) is a record (core/record.py) or a
dataclass — building one checks
nothing it does not need to, and reading a stored run needs no pydantic at all (issue 34:
`report`, `keys list`, `canary status` start in ≤ 5× `python -c pass`).
"""

from __future__ import annotations

import json
import math
import sys
import types
import typing
from enum import Enum
from pathlib import PurePath
from typing import Any, TypeVar

from swarm_tui.core.record import fields as record_fields
from swarm_tui.core.record import is_record

T = TypeVar("T")

# a field kept on the object but never in its JSON (field(metadata=EXCLUDE))
EXCLUDE = {"exclude": True}


def as_plain(obj: Any) -> Any:
    """JSON-ready data: dataclasses as dicts in field order (excluded fields left out),
    enums as their values, paths as text, a float that is no number (inf, nan) as null —
    as pydantic's JSON mode wrote them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int):
        return obj
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, str):
        return str(obj)
    if _structured(obj) and not isinstance(obj, type):
        return {f.name: as_plain(getattr(obj, f.name)) for f in _fields(obj)
                if not f.metadata.get("exclude")}
    if isinstance(obj, dict):
        return {str(as_plain(k)): as_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [as_plain(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    raise TypeError(f"no plain form for {type(obj).__name__}")


def to_json(obj: Any, indent: int | None = None) -> str:
    """The object as JSON text (UTF-8 as it is: a Korean run name stays readable)."""
    if indent is None:
        return json.dumps(as_plain(obj), ensure_ascii=False, separators=(",", ":"))
    return json.dumps(as_plain(obj), ensure_ascii=False, indent=indent)


def shallow(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as keyword arguments (nested objects kept, not copied)."""
    return {f.name: getattr(obj, f.name) for f in _fields(obj)}


def build(cls: type[T], data: dict[str, Any]) -> T:
    """A dataclass back from its plain form (as_plain's output, or a stored older one):
    nested dataclasses rebuilt by their type hints, keys it does not know ignored, missing
    ones left to their defaults. For data we wrote ourselves — it validates nothing."""
    hints = _hints(cls)
    known = {f.name for f in _fields(cls)}
    return cls(**{k: _value(hints[k], v) for k, v in data.items() if k in known})


def _structured(obj: Any) -> bool:
    """A record or a dataclass (an instance or a class)."""
    return is_record(obj) or hasattr(obj, "__dataclass_fields__")


def _fields(obj: Any) -> Any:
    """Its fields (each with .name and .metadata); `dataclasses` is imported only for a
    dataclass, whose module has imported it already."""
    if is_record(obj):
        return record_fields(obj)
    import dataclasses

    return dataclasses.fields(obj)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Its fields' types. Not typing.get_type_hints: that compiles every annotation of every
    class again (~2 ms for a run's summary) where the same few texts recur; each text is
    evaluated once per module here (issue 34: `report` starts in ≤ 5× `python -c pass`)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = {}
        for klass in reversed(cls.__mro__):
            # (from 3.10 a class's own: one without annotations gets an empty dict)
            for name, hint in getattr(klass, "__annotations__", {}).items():
                hints[name] = (_evaluated(hint, klass.__module__) if isinstance(hint, str)
                               else hint)
        _HINTS[cls] = hints
    return hints


_PLAIN = {"int": int, "str": str, "float": float, "bool": bool, "Any": Any}
_EVALUATED: dict[tuple[str, str], Any] = {}


def _evaluated(text: str, module: str) -> Any:
    hint = _PLAIN.get(text)
    if hint is None:
        hint = _EVALUATED.get((module, text))
        if hint is None:
            namespace = vars(sys.modules[module]) if module in sys.modules else {}
            try:
                hint = eval(text, namespace)  # our own classes' annotations
            except NameError:  # a name only imported for type checking: kept as it comes
                hint = Any
            _EVALUATED[(module, text)] = hint
    return hint


def _value(hint: Any, value: Any) -> Any:
    if value is None or _as_is(hint):
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _value(typing.get_args(hint)[0], value)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        for option in options:  # the first option the value's shape fits
            if _fits(option, value):
                return _value(option, value)
        return value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_value(item, v) for v in value]
    if origin is dict and isinstance(value, dict):
        _key, item = typing.get_args(hint)
        return {k: _value(item, v) for k, v in value.items()}
    if isinstance(hint, type):
        if _structured(hint) and isinstance(value, dict):
            return build(hint, value)
        if issubclass(hint, PurePath | Enum) and not isinstance(value, hint):
            return hint(value)
    return value


_AS_IS: dict[Any, bool] = {}


def _as_is(hint: Any) -> bool:
    """Whether a value of this type is its own plain form (no record, dataclass, path or
    enum anywhere in it): most fields are, and are then taken without a walk."""
    try:
        known = _AS_IS.get(hint)
    except TypeError:  # an unhashable marker in an Annotated: walked each time
        return _plain_all_through(hint)
    if known is None:
        known = _AS_IS[hint] = _plain_all_through(hint)
    return known


def _plain_all_through(hint: Any) -> bool:
    if isinstance(hint, type):
        return not (_structured(hint) or issubclass(hint, PurePath | Enum))
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _plain_all_through(typing.get_args(hint)[0])
    if origin is typing.Literal:
        return True
    return all(_plain_all_through(a) for a in typing.get_args(hint) if a is not Ellipsis)


def _fits(hint: Any, value: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _fits(typing.get_args(hint)[0], value)
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin is not None:
        return isinstance(value, origin)
    if isinstance(hint, type):
        if _structured(hint):
            return isinstance(value, dict)
        if hint is float:
            return isinstance(value, int | float) and not isinstance(value, bool)
        if issubclass(hint, PurePath):
            return isinstance(value, str | PurePath)
        return isinstance(value, hint)
    return True  # Literal and the like: the value as it is

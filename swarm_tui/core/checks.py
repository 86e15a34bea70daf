"""Checks pydantic applies to plain records, declared without importing pydantic.

The config's sections and the price entries are records (core/record.py), made
dataclasses for pydantic when it validates them: pydantic validates a
TOML file into them (same rules, same one-line errors as a BaseModel), while a command
that reads a validated copy (commands/config_copy.py) builds them with no pydantic at all.
Each marker is pydantic's documented `__get_pydantic_core_schema__` hook; pydantic_core is
imported only when pydantic builds a schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from swarm_tui.core.record import as_dataclass, is_record

T = TypeVar("T")

# on a dataclass: an unknown key is an error, as a BaseModel with extra="forbid"
STRICT = {"extra": "forbid"}


class Limits:
    """Bounds on a number (ge, gt, le, lt), as `Field(ge=…)` puts them."""

    def __init__(self, **bounds: float) -> None:
        self.bounds = bounds

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        schema = handler(source)
        schema.update(self.bounds)
        return schema


class Finite:
    """No inf or nan: TOML writes `inf`, and an infinite budget or price is no figure."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        schema = handler(source)
        schema["allow_inf_nan"] = False
        return schema


class Before:
    """A function the raw value passes through first (`"24h"` -> 86400.0)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.fn, handler(source))


class After:
    """A check on the value once it has its type (raises ValueError with the reason)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.fn, handler(source))


class JsonAs:
    """How the value is written in any JSON dump (a secret: its tag only)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        schema = handler(source)
        schema["serialization"] = core_schema.plain_serializer_function_ser_schema(
            self.fn, when_used="json")
        return schema


def checked(cls: type[T], data: Any) -> T:
    """`data` validated into `cls` (a dataclass with the markers above) by pydantic; raises
    pydantic's ValidationError."""
    from pydantic import TypeAdapter

    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        if is_record(cls):
            as_dataclass(cls)
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter.validate_python(data)


_ADAPTERS: dict[type, Any] = {}


def first_error(err: Any) -> tuple[str, str, int]:
    """A pydantic ValidationError as (dotted key, what is wrong, how many more)."""
    errors = err.errors()
    first = errors[0]
    key = ".".join(str(p) for p in first["loc"])
    # a BaseModel says extra_forbidden, a dataclass unexpected_keyword_argument
    unknown = first["type"] in ("extra_forbidden", "unexpected_keyword_argument")
    return key, "unknown key" if unknown else first["msg"], len(errors) - 1

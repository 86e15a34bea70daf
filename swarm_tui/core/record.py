"""Records: dataclass-shaped classes that cost nothing to define (issue 34).

`@dataclass` writes and compiles `__init__`, `__repr__` and `__eq__` for every class it
decorates (0.4–2.3 ms each here), and importing `dataclasses` imports `inspect`, `ast`,
`dis` and `tokenize` (~20 ms). A reading command (`report last`, `canary status`) builds
~25 record classes and ran at 6–7× `python -c pass` against a budget of 5×. A record's
methods are shared functions that read the class's field list instead; type checkers see
a dataclass (`dataclass_transform`).

What it keeps of dataclasses: fields from annotations in definition order (a base's
first), defaults and `field(default_factory=...)`, `kw_only`, `frozen`, `slots`, `eq`,
`repr=False` fields, `metadata`, `__post_init__`. `fields()` and `replace()` are here;
`as_dataclass()` makes one a real dataclass for pydantic (the config loader), which has
imported `dataclasses` anyway.

A record's shared `__init__` is ~3× slower per object than a generated one (3.8 µs
against 1.1 µs for nine fields here): a record built per row or per call writes its own
(`store/runs.py`'s `StoredTask`), which the decorator keeps, as `@dataclass` does.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One field: its name, default or factory, whether `repr` shows it, its metadata."""

    __slots__ = ("default", "default_factory", "metadata", "name", "repr")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING,
                 repr: bool = True, metadata: Mapping[str, Any] | None = None) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field cannot have both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.metadata: Mapping[str, Any] = metadata or {}

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] = MISSING,
          repr: bool = True, metadata: Mapping[str, Any] | None = None) -> Any:
    """As dataclasses.field: a default made per object, a field left out of repr, ..."""
    return Field(default, default_factory, repr, metadata)


class Spec:
    """A record class's fields and options, kept as `cls.__record__`."""

    __slots__ = ("fields", "frozen", "kw_only", "names", "positional", "post_init")

    def __init__(self, fields: tuple[Field, ...], positional: int, kw_only: bool,
                 frozen: bool, post_init: bool) -> None:
        self.fields = fields
        self.names = tuple(f.name for f in fields)
        self.positional = positional  # how many may be given by position
        self.kw_only = kw_only
        self.frozen = frozen
        self.post_init = post_init


class FrozenRecordError(AttributeError):
    """Assigning to a field of a frozen record (as dataclasses.FrozenInstanceError)."""


def _init(self: Any, /, *args: Any, **kwargs: Any) -> None:
    spec: Spec = self.__record__
    if args:
        if len(args) > spec.positional:
            raise TypeError(f"{type(self).__name__}() takes {spec.positional} positional "
                            f"arguments but {len(args)} were given")
        for name, value in zip(spec.names, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got multiple values for "
                                f"argument '{name}'")
            kwargs[name] = value
    put = object.__setattr__
    for f in spec.fields:
        value = kwargs.pop(f.name, MISSING)
        if value is MISSING:
            if f.default_factory is not MISSING:
                value = f.default_factory()
            elif f.default is MISSING:
                raise TypeError(f"{type(self).__name__}() missing required argument: "
                                f"'{f.name}'")
            else:
                value = f.default
        put(self, f.name, value)
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                        f"'{next(iter(kwargs))}'")
    if spec.post_init:
        self.__post_init__()


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                      for f in self.__record__.fields if f.repr)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> bool:
    spec: Spec = self.__record__
    if other.__class__ is not self.__class__:
        return NotImplemented
    return all(getattr(self, n) == getattr(other, n) for n in spec.names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in self.__record__.names))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    if name in self.__record__.names:
        raise FrozenRecordError(f"cannot assign to field '{name}'")
    object.__setattr__(self, name, value)


def _frozen_delattr(self: Any, name: str) -> None:
    if name in self.__record__.names:
        raise FrozenRecordError(f"cannot delete field '{name}'")
    object.__delattr__(self, name)


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, n) for n in self.__record__.names]


def _setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(self.__record__.names, state, strict=True):
        object.__setattr__(self, name, value)  # (a frozen record's own __setattr__ refuses)


def _build(cls: type, kw_only: bool, frozen: bool, slots: bool, eq: bool) -> type:
    inherited: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        base_spec = base.__dict__.get("__record__")
        if base_spec is not None:
            inherited.update((f.name, f) for f in base_spec.fields)
    own: dict[str, Field] = {}
    namespace = cls.__dict__
    for name, hint in namespace.get("__annotations__", {}).items():
        if isinstance(hint, str) and hint.startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = namespace.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        f.name = name
        own[name] = f
    fields = {**inherited, **own}
    # every field may be given by position up to the first keyword-only one: a base's
    # own kw_only is not remembered (none of ours mixes them)
    positional = 0 if kw_only else len(fields)
    if not kw_only:
        required_after_default = False
        seen_default = False
        for f in fields.values():
            if f.default is MISSING and f.default_factory is MISSING:
                required_after_default |= seen_default
            else:
                seen_default = True
        if required_after_default:
            raise TypeError(f"{cls.__name__}: a field without a default follows one with")
    spec = Spec(tuple(fields.values()), positional, kw_only, frozen,
                hasattr(cls, "__post_init__"))
    methods: dict[str, Any] = {"__record__": spec}
    for name in ("__init__", "__repr__"):
        if name not in namespace:
            methods[name] = _init if name == "__init__" else _repr
    if eq:
        methods.setdefault("__eq__", namespace.get("__eq__", _eq))
        if "__hash__" not in namespace or namespace["__hash__"] is None:
            methods["__hash__"] = _hash if frozen else None
    if frozen:
        methods["__setattr__"] = _frozen_setattr
        methods["__delattr__"] = _frozen_delattr
        if slots:  # copy and pickle set slots by setattr otherwise (dataclasses does this too)
            methods["__getstate__"] = _getstate
            methods["__setstate__"] = _setstate
    if slots:  # a new class, as dataclasses makes one: slots cannot be added to a class
        body = {k: v for k, v in namespace.items()
                if k not in own and k not in ("__dict__", "__weakref__")}
        body.update(methods, __slots__=tuple(own))
        return type(cls)(cls.__name__, cls.__bases__, body)
    for name, f in own.items():  # a plain default stays a class attribute, as it does there
        if f.default is not MISSING:
            type.__setattr__(cls, name, f.default)
        elif name in namespace:
            type.__delattr__(cls, name)
    for name, value in methods.items():
        type.__setattr__(cls, name, value)
    return cls


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, kw_only: bool = False, frozen: bool = False, slots: bool = False,
           eq: bool = True) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(field_specifiers=(field, Field))
def record(cls: type[T] | None = None, /, *, kw_only: bool = False, frozen: bool = False,
           slots: bool = False, eq: bool = True) -> Any:
    """As `@dataclass` (with the same options), without generating code."""
    def wrap(c: type[T]) -> type[T]:
        return _build(c, kw_only, frozen, slots, eq)
    return wrap if cls is None else wrap(cls)


def is_record(obj: Any) -> bool:
    return hasattr(obj, "__record__")


def fields(obj: Any) -> tuple[Field, ...]:
    """A record's (or a record class's) fields, in order."""
    spec: Spec = obj.__record__
    return spec.fields


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of a record with some fields changed (as dataclasses.replace)."""
    spec: Spec = obj.__record__  # type: ignore[attr-defined]
    unknown = changes.keys() - set(spec.names)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field '{sorted(unknown)[0]}'")
    values = {n: getattr(obj, n) for n in spec.names}
    values.update(changes)
    return type(obj)(**values)


def as_dataclass(cls: type) -> None:
    """Make a record class a real dataclass too (its methods kept), for a library that
    reads dataclasses (pydantic validates the config into records)."""
    import dataclasses  # only the loader's path, which imports pydantic anyway
    import inspect

    if "__dataclass_fields__" in cls.__dict__:
        return
    for base in reversed(cls.__mro__[1:]):
        if "__record__" in base.__dict__:
            as_dataclass(base)
    spec: Spec = cls.__dict__["__record__"]
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a record with slots cannot become a dataclass")
    own = inspect.get_annotations(cls)
    for f in spec.fields:
        if f.name in own:
            setattr(cls, f.name, dataclasses.field(
                default=f.default if f.default is not MISSING else dataclasses.MISSING,
                default_factory=(f.default_factory if f.default_factory is not MISSING
                                 else dataclasses.MISSING),
                repr=f.repr, metadata=f.metadata))
    # init/repr/eq stay ours; it puts the class attributes back as they were
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=spec.kw_only)
    for hint in typing.get_type_hints(cls).values():  # the records its fields hold
        for named in _types_in(hint):
            if "__record__" in getattr(named, "__dict__", {}):
                as_dataclass(named)


def _types_in(hint: Any) -> list[Any]:
    return [hint, *(t for arg in typing.get_args(hint) for t in _types_in(arg))]

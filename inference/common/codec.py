"""The one JSON codec of the result records (``common/record.py``, ``common/summary_record.py``).

A record is a frozen dataclass that subclasses ``Record``. Its fields, in their declared order, are
its JSON keys in their written order; the field's type says what a key may hold, and what a key
left out becomes. A field says the rest in its metadata (``json_field``): a key spelled otherwise
(``MFU``), a key that must be there, a key written only when it applies, a value checked before the
others are read. So adding a figure is one line in the record (docs/result_schema.md).

Reading (``from_json``), one rule for every record:

- a key left out takes the field's ``missing`` value, else its dataclass default, else its type's
  zero: null where the type allows it, else ``0``, ``0.0``, ``""``, ``False``, an empty list or
  object, or the nested record built with no arguments;
- null where the type allows it is None; elsewhere it is as if left out, except for a required key
  (``key 'k' is null``);
- a value of another JSON type is refused (``key 'k' is not a number``); a nested record and the
  items of a tuple of records are read the same way, named by their place (``where: performance[1]``);
- a key with a ``check`` (a version, a kind) is read before the others: what they mean depends on it.

Every refusal is one ``RecordError`` line naming the file, the record's place and the key.
Writing (``to_json``) gives each field's value as it is, a nested record as its own JSON, a tuple as
a list. Both run after the measurement, never inside a timed loop (bench/record_codec.py measures
them).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, ClassVar, Final, Iterable, Literal, Self, dataclass_transform

Json = dict[str, Any]

_NUMBER: Final = (int, float)
_PLAIN: Final = frozenset({int, float, str, bool, dict, list})
_NAMES: Final = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a JSON object"}


class RecordError(ValueError):
    """A result file that is not the shape this version writes: one line naming the file and key."""


# A field's JSON rules besides its key, whether it is required and its group, with their defaults
# (json_field's docstring says what each means); any other keyword is dataclasses.field's.
_RULES: Final[dict[str, Any]] = {
    "missing": None,
    "check": None,
    "read": None,
    "write": True,
    "write_if": None,
    "skip_none": False,
    "skip_empty": False,
    "empty_is_none": False,
    "none_as": None,
    "flatten": False,
}


def json_field(
    *,
    key: str | None = None,
    required: bool | Callable[[Json], bool] = False,
    group: str | None = None,
    **options: Any,
) -> Any:
    """A record field with its JSON rules (each by keyword; any other keyword is ``dataclasses.field``'s).

    ``key``: the JSON key, when it is not the field's name. ``required``: the key must be there (a
    function of the object: only for some kinds of record). ``missing``: what a key left out
    becomes. ``check``: the value's message when it is refused, None when accepted. ``read``: the
    value made from the whole object (a value that depends on other keys). ``write``: False, never
    written. ``write_if``: written only when true of the record; ``skip_none``, ``skip_empty``: not
    written when None, when empty. ``empty_is_none``: an empty object reads as None (no block).
    ``none_as``: what None is written as. ``flatten``: a nested record whose keys sit among this
    record's own (present when any of them is). ``group``: a name for a set of fields that
    code lists by it (FlagPerf's figures).
    """
    rules = {name: options.pop(name, default) for name, default in _RULES.items()}
    meta = {"key": key, "required": required, "group": group, **rules}
    return field(metadata={"json": meta}, **options)


def derived(compute: Callable[[Any], Any], *, init: Literal[False] = False) -> Any:
    """A figure computed from the record's fields (``Verdict.valid``), written in its declared place
    and never read: it cannot disagree with the fields it comes from."""
    return field(init=init, compare=False, repr=False, metadata={"json": {"derived": compute}})


@dataclass_transform(frozen_default=True, field_specifiers=(field, json_field, derived))
class Record:
    """The base of every result record: each subclass is a frozen dataclass, with ``to_json()`` and
    ``from_json()`` by the codec. A subclass names its place for the messages when no place is given:
    ``class Verdict(Record, where="verdict")``."""

    WHERE: ClassVar[str] = "record"

    def __init_subclass__(cls, where: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if where is not None:
            cls.WHERE = where
        dataclass(frozen=True)(cls)

    def __post_init__(self) -> None:
        for name, compute in _plan(type(self)).derived:
            object.__setattr__(self, name, compute(self))

    def to_json(self) -> Json:
        return encode(self)

    @classmethod
    def from_json(cls, data: Any, where: str | None = None) -> Self:
        return decode(cls, data, cls.WHERE if where is None else where)

    def json_order(self, out: Json) -> Json:
        """``out`` (the written object) in this record's key order; the declared order unless a record
        has another for some of its kinds."""
        return out


# ---- the plan: what the codec reads from a record's declaration, once per class ---------------------


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    types: tuple[type, ...] | None  # the JSON types the key may hold; None: any
    nullable: bool
    record: type[Record] | None  # a nested record
    items: type[Record] | None  # a tuple of records
    container: type | None  # tuple or list: the value is made one
    default: Callable[[], Any]  # a key left out
    required: bool | Callable[[Json], bool]
    check: Callable[[Any], str | None] | None
    read: Callable[[Json, str], Any] | None
    empty_is_none: bool


@dataclass(frozen=True)
class _Write:
    name: str
    key: str
    write_if: Callable[[Any], bool] | None
    none_as: Callable[[], Any] | None
    flatten: bool


@dataclass(frozen=True)
class _Plan:
    reads: tuple[_Field, ...]  # in reading order: checked keys first
    flattened: tuple[tuple[str, type[Record]], ...]
    writes: tuple[_Write, ...]
    derived: tuple[tuple[str, Callable[[Any], Any]], ...]
    reorders: bool


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


def _make_plan(cls: type) -> _Plan:
    hints = typing.get_type_hints(cls)
    reads: list[_Field] = []
    flattened: list[tuple[str, type[Record]]] = []
    writes: list[_Write] = []
    derived_: list[tuple[str, Callable[[Any], Any]]] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("json", {})
        if "derived" in meta:
            derived_.append((f.name, meta["derived"]))
            writes.append(_Write(f.name, f.name, None, None, False))
            continue
        if not f.init:  # a constant of the class (AggregateRow's qps_ci95): neither read nor written
            continue
        key = meta.get("key") or f.name
        shape = _shape(hints[f.name])
        if meta.get("flatten"):
            flattened.append((f.name, shape[2]))
        else:
            reads.append(_field(f, key, shape, meta))
        if meta.get("write", True):
            write_if = meta.get("write_if")
            if meta.get("skip_none"):
                write_if = _when(f.name, lambda value: value is not None)
            elif meta.get("skip_empty"):
                write_if = _when(f.name, bool)
            writes.append(_Write(f.name, key, write_if, meta.get("none_as"), bool(meta.get("flatten"))))
    reads.sort(key=lambda r: r.check is None)  # stable: the checked keys first, then declared order
    return _Plan(
        tuple(reads),
        tuple(flattened),
        tuple(writes),
        tuple(derived_),
        getattr(cls, "json_order", Record.json_order) is not Record.json_order,
    )


def _when(name: str, test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda record: test(getattr(record, name))


_Shape = tuple[tuple[type, ...] | None, bool, Any, Any, type | None]


def _shape(hint: Any) -> _Shape:
    """(JSON types, nullable, nested record, record items, container) of a field's type."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        nullable = type(None) in args
        shapes = [_shape(a) for a in args if a is not type(None)]
        if len(shapes) == 1:
            one = shapes[0]
            return one[0], nullable, one[2], one[3], one[4]
        json_types = tuple(t for s in shapes if s[0] is not None for t in s[0])
        return (
            (None if any(s[0] is None for s in shapes) else tuple(dict.fromkeys(json_types))),
            nullable,
            None,
            None,
            None,
        )
    if hint is Any:
        return None, False, None, None, None
    if isinstance(hint, type) and issubclass(hint, Record):
        return (dict,), False, hint, None, None
    base = origin or hint
    if base is tuple:
        item = typing.get_args(hint)[0] if typing.get_args(hint) else Any
        record = item if isinstance(item, type) and issubclass(item, Record) else None
        return (list,), False, None, record, tuple
    if base is list:
        return (list,), False, None, None, list
    if base is dict:
        return (dict,), False, None, None, None
    if base is float:
        return _NUMBER, False, None, None, None
    return (base,), False, None, None, None


def _field(f: dataclasses.Field, key: str, shape: _Shape, meta: dict) -> _Field:
    json_types, nullable, record, items, container = shape
    missing = meta.get("missing")
    if missing is None:
        if f.default is not MISSING:
            value = f.default
            missing = lambda: value  # noqa: E731 - a constant default
        elif f.default_factory is not MISSING:
            missing = f.default_factory
        else:
            missing = _zero(json_types, nullable, record, container)
    return _Field(
        f.name,
        key,
        json_types,
        nullable,
        record,
        items,
        container,
        missing,
        meta.get("required", False),
        meta.get("check"),
        meta.get("read"),
        bool(meta.get("empty_is_none")),
    )


def _zero(
    json_types: tuple[type, ...] | None, nullable: bool, record: Any, container: type | None
) -> Callable[[], Any]:
    """A type's value for a key left out: null where allowed, else the type's empty value."""
    if nullable or json_types is None:
        return lambda: None
    if record is not None:
        return record
    if container is not None:
        return container
    kind = json_types[-1] if json_types != _NUMBER else float
    return kind  # int() 0, float() 0.0, str() "", bool() False, dict() {}


# ---- reading and writing ------------------------------------------------------------------------------


def decode(cls: type[Any], data: Any, where: str) -> Any:
    """``data`` as a ``cls`` record; a key missing or of another type raises ``RecordError`` naming ``where``."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: not a JSON object")
    plan = _plan(cls)
    values: dict[str, Any] = {}
    hooks = []
    for f in plan.reads:
        if f.read is not None:
            hooks.append(f)
        else:
            values[f.name] = _read(f, data, where)
    for name, record in plan.flattened:
        keys = [w.key for w in _plan(record).writes]
        values[name] = decode(record, data, where) if any(k in data for k in keys) else None
    for f in hooks:
        assert f.read is not None
        values[f.name] = f.read(data, where)
    return cls(**values)


def _read(f: _Field, data: Json, where: str) -> Any:
    key = f.key
    required = f.required(data) if callable(f.required) else f.required
    if key not in data:
        if required:
            raise RecordError(f"{where}: no key {key!r}")
        return f.default()
    value = data[key]
    if value is None:
        if f.nullable:
            return None
        if required:
            raise RecordError(f"{where}: key {key!r} is null")
        return f.default()
    kinds = f.types
    if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
        expected = "a number" if kinds == _NUMBER else " or ".join(_NAMES.get(t, t.__name__) for t in kinds)
        raise RecordError(f"{where}: key {key!r} is not {expected}")
    if f.check is not None:
        message = f.check(value)
        if message is not None:
            raise RecordError(f"{where}: {message}")
    if f.record is not None:
        if f.empty_is_none and not value:
            return None
        return decode(f.record, value, f"{where}: {key}")
    if f.items is not None:
        return decode_items(f.items, value, f"{where}: {key}")
    if f.container is tuple:
        return tuple(value)
    return value


def decode_items(cls: type[Any], items: list, where: str) -> tuple:
    """A JSON list as a tuple of ``cls`` records, each named by its place (``where[i]``)."""
    return tuple(decode(cls, item, f"{where}[{i}]") for i, item in enumerate(items))


def read_list(data: Json, key: str, where: str) -> list:
    """``data[key]`` as a list (absent or null: empty); another type is one line naming the key."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError(f"{where}: key {key!r} is not a list")
    return value


def encode(record: Any) -> Json:
    """``record`` as its JSON object, its keys in its declared order."""
    plan = _plan(type(record))
    out: Json = {}
    for w in plan.writes:
        if w.write_if is not None and not w.write_if(record):
            continue
        value = getattr(record, w.name)
        if w.flatten:
            if value is not None:
                out.update(encode(value))
        elif value is None and w.none_as is not None:
            out[w.key] = w.none_as()
        else:
            out[w.key] = json_value(value)
    return record.json_order(out) if plan.reorders else out


def json_value(value: Any) -> Any:
    """A value as JSON: a nested record as its own JSON, a tuple as a list, anything else as it is."""
    if value is None or type(value) in _PLAIN:  # most values: no lookup of a to_json they cannot have
        return value
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    if isinstance(value, Record):
        return encode(value)
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


JsonKey = str | tuple[str, str]  # an attribute written under its own name, or (key, attribute)


def as_json(record: Any, keys: Iterable[JsonKey]) -> Json:
    """``record``'s attributes as a JSON object, in the order of ``keys``: a name is both the key and the
    attribute, a pair is ``(key, attribute)``. For the container side's blocks that are not records."""
    out: Json = {}
    for key in keys:
        name, attribute = (key, key) if isinstance(key, str) else key
        out[name] = json_value(getattr(record, attribute))
    return out

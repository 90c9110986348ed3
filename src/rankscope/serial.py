"""One JSON form for every rankscope type: dataclasses, NamedTuples and enums in, plain JSON out, and back.

No type writes its own ``to_dict``/``from_dict``. :func:`to_json` walks dataclass fields,
NamedTuple fields and containers; :func:`from_json` rebuilds a type from the JSON using its
annotations. A field can say how it is written through its ``metadata``:

- ``OMIT_NONE``: left out of the JSON while it is ``None`` (NamedTuple fields whose default is
  ``None`` are always written this way: ``Frame.library`` is only there for native frames);
- ``SKIP``: never written nor read (derived or private state);
- ``{"round": 3}``: a float written with that many decimals.

A *document* is the top-level JSON a command prints, tagged ``{"schema": "rankscope.NAME/V", ...}``.
Its dataclass names the tag in a class attribute, ``SCHEMA: ClassVar[str]`` (the one way documents
are declared: tests/test_documents.py finds every one); :func:`dump_document` writes one,
:func:`load_document` checks the schema's name and reads it.

Loading ignores unknown keys (a newer rankscope may add fields) and fills missing ones from
the field's default; a missing field without a default, or a value of the wrong shape, raises
``ValueError`` naming the field. Dumping imports nothing beyond dataclasses and enum (it runs on
every node of a multi-node ``stacks``); loading imports typing on first use.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import TYPE_CHECKING, Any, Optional, TypeVar, overload

if TYPE_CHECKING:  # for mypy only: a Protocol class costs start-up on every node
    from typing import ClassVar, Protocol

    class Document(Protocol):
        """A dataclass printed as a top-level JSON document: its class names the schema."""

        SCHEMA: ClassVar[str]


T = TypeVar("T")
D = TypeVar("D", bound="Document")

OMIT_NONE: dict[str, Any] = {"omit_none": True}
SKIP: dict[str, Any] = {"skip": True}

_SCALARS = (str, int, float, bool, type(None))
#: Values of exactly these types are written as they are (subclasses, enums among them, are not).
_EXACT_SCALARS = frozenset(_SCALARS)
_MISSING = object()

# type -> [(attribute, omit_none, round_to)] for dumping.
_DUMP_PLANS: dict[type, list[tuple[str, bool, Any]]] = {}


def _dump_plan(cls: type) -> list[tuple[str, bool, Any]]:
    plan = _DUMP_PLANS.get(cls)
    if plan is None:
        plan = [
            (f.name, bool(f.metadata.get("omit_none")), f.metadata.get("round"))
            for f in dataclasses.fields(cls)
            if not f.metadata.get("skip")
        ]
        _DUMP_PLANS[cls] = plan
    return plan


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, strings, numbers, booleans, None)."""
    cls = type(value)
    if cls in _EXACT_SCALARS:  # the common case first: no isinstance chain per string or number
        return value
    plan = _DUMP_PLANS.get(cls)
    if plan is not None:  # a dataclass already written once
        return _dump_dataclass(value, plan)
    if isinstance(value, _SCALARS) and not isinstance(value, Enum):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        defaults = value._field_defaults  # type: ignore[attr-defined]
        return {
            name: to_json(item)
            for name, item in zip(value._fields, value)
            if not (item is None and name in defaults and defaults[name] is None)
        }
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dump_dataclass(value, _dump_plan(cls))
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _dump_dataclass(value: Any, plan: list[tuple[str, bool, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, omit_none, round_to in plan:
        item = getattr(value, name)
        if item is None and omit_none:
            continue
        if round_to is not None and isinstance(item, float):
            item = round(item, round_to)
        out[name] = item if type(item) in _EXACT_SCALARS else to_json(item)
    return out


@overload
def dump_document(document: Document) -> dict[str, Any]: ...


@overload
def dump_document(document: object, schema: str) -> dict[str, Any]: ...


def dump_document(document: Any, schema: Optional[str] = None) -> dict[str, Any]:
    """``{"schema": SCHEMA, ...document's fields}``: the top-level JSON of a command.

    ``schema`` is for a document that stands in for another kind's (the error a ``logs`` verb ends
    with is printed as that verb's document); by default it is the document class's ``SCHEMA``.
    """
    data = to_json(document)
    if not isinstance(data, dict):
        raise TypeError("a document is a dataclass")
    return {"schema": schema or type(document).SCHEMA, **data}


def load_document(cls: type[D], data: Any) -> D:
    """Read a document written by :func:`dump_document`; any version of ``cls.SCHEMA``'s name is
    accepted, a document of another kind raises ValueError."""
    name = cls.SCHEMA.rsplit("/", 1)[0] + "/"
    found = data.get("schema", "") if isinstance(data, dict) else ""
    if not isinstance(found, str) or not found.startswith(name):
        raise ValueError(f"not a {name[:-1]} document (schema {found!r})")
    return from_json(cls, {k: v for k, v in data.items() if k != "schema"})


def from_json(cls: type[T], data: Any) -> T:
    """Rebuild a ``cls`` (a dataclass, NamedTuple, enum, container or scalar type) from :func:`to_json` output."""
    return _convert(cls, data, cls.__name__)  # type: ignore[no-any-return]


# type -> [(field name, annotation, default or _MISSING, factory or None)] for loading.
_LOAD_PLANS: dict[type, list[tuple[str, Any, Any, Any]]] = {}


def _load_plan(cls: type) -> list[tuple[str, Any, Any, Any]]:
    plan = _LOAD_PLANS.get(cls)
    if plan is not None:
        return plan
    import typing

    hints = typing.get_type_hints(cls)
    plan = []
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.metadata.get("skip") or not f.init:
                continue
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            default = f.default if f.default is not dataclasses.MISSING else _MISSING
            plan.append((f.name, hints[f.name], default, factory))
    else:  # NamedTuple
        defaults = cls._field_defaults  # type: ignore[attr-defined]
        for name in cls._fields:  # type: ignore[attr-defined]
            plan.append((name, hints[name], defaults.get(name, _MISSING), None))
    _LOAD_PLANS[cls] = plan
    return plan


def _convert(tp: Any, data: Any, where: str) -> Any:
    import typing

    if tp is Any:
        return data
    origin = typing.get_origin(tp)
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            return _convert(arg, data, where)
    if origin in (list, tuple, dict) or origin is not None:
        return _convert_container(tp, origin, data, where)
    if isinstance(tp, type):
        if issubclass(tp, Enum):
            try:
                return tp(data)
            except ValueError:
                raise ValueError(f"{where}: {data!r} is not a {tp.__name__}") from None
        if dataclasses.is_dataclass(tp) or (issubclass(tp, tuple) and hasattr(tp, "_fields")):
            if not isinstance(data, dict):
                raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
            kwargs = {}
            for name, annotation, default, factory in _load_plan(tp):
                if name in data:
                    kwargs[name] = _convert(annotation, data[name], f"{where}.{name}")
                elif factory is not None:
                    kwargs[name] = factory()
                elif default is not _MISSING:
                    kwargs[name] = default
                else:
                    raise ValueError(f"{where}: missing field {name!r}")
            return tp(**kwargs)
        if tp is float and isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
        if tp in (str, int, bool) and isinstance(data, tp) and not (tp is int and isinstance(data, bool)):
            return data
        raise ValueError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
    raise ValueError(f"{where}: cannot read type {tp!r}")


def _convert_container(tp: Any, origin: Any, data: Any, where: str) -> Any:
    import collections.abc
    import typing

    args = typing.get_args(tp)
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(data):
                raise ValueError(f"{where}: expected {len(args)} items, got {len(data)}")
            return tuple(_convert(a, d, f"{where}[{i}]") for i, (a, d) in enumerate(zip(args, data)))
        item = args[0] if args else Any
        items = [_convert(item, d, f"{where}[{i}]") for i, d in enumerate(data)]
        return items if origin is list else tuple(items)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): _convert(value_type, v, f"{where}[{k!r}]") for k, v in data.items()}
    raise ValueError(f"{where}: cannot read type {tp!r}")

"""An options dataclass as a command line, and back: each field names its flag (:func:`flag`).

Every options object that becomes another process's command line (a node's `stacks`, `net probe` on
every node, each rank of `gpu-test` and `bench allreduce`) writes it with :func:`to_flags`, so a new
option cannot be forgotten on the way; a field without a flag stays with the process that launches
(``--nproc``, ``--isolate``). Each verb's test reads the command line back through its click command
to an equal object; :func:`from_flags` reads it without click (a node's light entry).

Shared module: stdlib only.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any, Optional

#: Field metadata key: the flag that sets the field.
FLAG = "flag"

#: How a flag's value is read back, by the field's annotation.
_READ: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "Optional[int]": int,
    "Optional[float]": float,
    "Optional[str]": str,
    "tuple[int, ...]": int,
    "tuple[str, ...]": str,
}


def flag(name: str, default: Any) -> Any:
    """A dataclass field set by ``name`` on the command line."""
    return field(default=default, metadata={FLAG: name})


def to_flags(options: Any) -> list[str]:
    """A flag for every flagged field that is not its default: a bool as the flag alone, a tuple as
    the flag once per item, anything else as the flag and its ``str`` (a float's is its repr: it
    reads back to the same float)."""
    argv: list[str] = []
    for spec in fields(options):
        name = spec.metadata.get(FLAG)
        value = getattr(options, spec.name)
        if name is None or value == spec.default:
            continue
        if isinstance(value, bool):
            argv.append(name)
        elif isinstance(value, tuple):
            for item in value:
                argv += [name, str(item)]
        else:
            argv += [name, str(value)]
    return argv


def from_flags(cls: type, argv: list[str]) -> Optional[dict[str, Any]]:
    """The field values :func:`to_flags` wrote into ``argv``, by field name; None for anything else
    (an unknown flag, a missing or unreadable value)."""
    specs = {spec.metadata[FLAG]: spec for spec in fields(cls) if FLAG in spec.metadata}
    values: dict[str, Any] = {}
    rest = list(argv)
    try:
        while rest:
            name, *rest = rest
            spec = specs.get(name)
            if spec is None:
                return None
            if isinstance(spec.default, bool):
                values[spec.name] = True
                continue
            text, *rest = rest
            value = _READ[str(spec.type)](text)
            values[spec.name] = (
                (*values.get(spec.name, ()), value) if isinstance(spec.default, tuple) else value
            )
    except (ValueError, KeyError):
        return None
    return values

"""Which interfaces a NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME value selects, and loopback addresses (pure).

The one reading of these variables for every verb that judges them (doctor, gpu-test, net).

NCCL (docs: "NCCL_SOCKET_IFNAME"): a comma-separated list of prefixes (``eth`` matches ``eth0``,
``eth1``); a leading ``^`` excludes the listed ones instead; a leading ``=`` (after ``^`` when
both) makes every entry an exact name. NCCL_IB_HCA reads the same way, with an optional ``:port``.
Gloo (GLOO_SOCKET_IFNAME): exact interface names, comma-separated for several devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class IfnameSpec:
    exclude: bool
    exact: bool
    entries: tuple[str, ...]


def parse_nccl(value: str) -> IfnameSpec:
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    entries = tuple(entry.strip().split(":", 1)[0] for entry in text.split(",") if entry.strip())
    return IfnameSpec(exclude, exact, entries)


def _matches(entry: str, name: str, exact: bool) -> bool:
    return name == entry if exact else name.startswith(entry)


def selected(spec: IfnameSpec, interfaces: Sequence[str]) -> list[str]:
    """The interfaces NCCL would consider with this value."""
    hit = [name for name in interfaces if any(_matches(e, name, spec.exact) for e in spec.entries)]
    return [name for name in interfaces if name not in hit] if spec.exclude else hit


def unmatched(spec: IfnameSpec, interfaces: Sequence[str]) -> list[str]:
    """Entries that name no interface here (a typo, or a name from another node)."""
    return [e for e in spec.entries if not any(_matches(e, name, spec.exact) for name in interfaces)]


def parse_gloo(value: str) -> IfnameSpec:
    return IfnameSpec(False, True, tuple(entry.strip() for entry in value.split(",") if entry.strip()))


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or an IPv4-mapped 127.x, as getaddrinfo writes them (a ``%scope`` suffix allowed).

    A string test, not :mod:`ipaddress`: importing it costs more than a whole doctor run's reading.
    """
    address = address.split("%", 1)[0]
    return address.startswith(("127.", "::ffff:127.")) or address == "::1"


def missing_interfaces(variable: str, value: str, interfaces: Sequence[str]) -> list[str]:
    """What in ``VARIABLE=value`` names no interface here: the unmatched entries, or, for an
    exclusion (``^``) that leaves nothing, the whole value. Empty when the value is usable.

    NCCL_* read as NCCL does (prefixes, ``^``, ``=``); GLOO_SOCKET_IFNAME and others as exact names.
    """
    spec = parse_nccl(value) if variable.startswith("NCCL_") else parse_gloo(value)
    if spec.exclude:
        return [] if selected(spec, interfaces) else [value]
    return unmatched(spec, interfaces)

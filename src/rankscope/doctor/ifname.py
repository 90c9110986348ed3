"""Which interfaces a NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME value selects (pure).

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

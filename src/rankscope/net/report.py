"""The documents of the net room (one schema each, JSON through rankscope.serial)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.net.advice import Finding, Recommendation
from rankscope.net.ifaces import Interface
from rankscope.net.master import MasterCheck, MasterFacts
from rankscope.net.sysfs import RdmaPort
from rankscope.net.verdicts import LinkFinding, Matrix, ProbeResult


@dataclass
class IfacesReport:
    SCHEMA: ClassVar[str] = "rankscope.net.ifaces/1"

    host: str
    interfaces: list[Interface]
    rdma_only: list[RdmaPort]
    default_route: list[str]
    recommendation: Recommendation
    hostname_resolves_to: Optional[list[str]]
    findings: list[Finding] = field(default_factory=list)


@dataclass
class ProbeReport:
    """One node's answer to `net probe` (what each node of `net check` sends back)."""

    SCHEMA: ClassVar[str] = "rankscope.net.probe/1"

    host: str
    results: list[ProbeResult]
    #: ``ADDR:PORT`` served meanwhile (``--serve``), or empty.
    listening: str = ""
    #: Why the port could not be served (in use, permission), or empty.
    listen_error: str = ""
    accepted: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    SCHEMA: ClassVar[str] = "rankscope.net.check/1"

    matrix: Matrix
    findings: list[LinkFinding]
    #: Node -> what its own listener said (in use, permission denied), when not plain.
    listen_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class MasterReport:
    """``rankscope.net.master``: what was found about MASTER_ADDR:MASTER_PORT, and the checks on it."""

    SCHEMA: ClassVar[str] = "rankscope.net.master/1"

    facts: MasterFacts
    checks: list[MasterCheck]

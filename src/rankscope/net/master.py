"""`net check --master`: is MASTER_ADDR:MASTER_PORT usable, before the job starts?

:func:`gather_master` collects the facts (resolution, whether the address is this node's, whether
the port is free to bind or reachable); :func:`judge_master` turns them into PASS/WARN/FAIL lines,
each with its fix (pure).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from rankscope.net.ifname import is_loopback
from rankscope.net.probe import Target, probe, resolve_all
from rankscope.net.verdicts import MEANING, Verdict
from rankscope.ranks import spans_nodes


@dataclass(frozen=True)
class MasterFacts:
    addr: str
    port: Optional[int]
    multi_node: bool
    #: The address MASTER_ADDR resolves to; None when it does not resolve.
    resolved: Optional[str] = None
    resolve_error: str = ""
    #: MASTER_ADDR is an address of this node (rank 0 will listen here).
    local: bool = False
    #: errno of binding the port here (local only): 0 free, EADDRINUSE taken, ...
    bind_errno: Optional[int] = None
    #: The probe from here (remote only).
    verdict: Optional[Verdict] = None
    detail: str = ""


@dataclass(frozen=True)
class MasterCheck:
    level: str  # PASS, WARN or FAIL
    what: str
    fix: str = ""


def multi_node(env: Mapping[str, str], nnodes: Optional[int] = None) -> bool:
    """Does ``--nnodes`` (or else the launcher's environment) say the job spans several nodes?"""
    return nnodes > 1 if nnodes is not None else spans_nodes(env)


def judge_master(facts: MasterFacts) -> list[MasterCheck]:
    """The checks, in the order a job meets them."""
    addr, port = facts.addr, facts.port
    out: list[MasterCheck] = []
    if not addr:
        return [
            MasterCheck(
                "FAIL",
                "MASTER_ADDR is not set",
                "export MASTER_ADDR=<the first node> (in SLURM: "
                "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)), or pass --master-addr HOST --master-port PORT",
            )
        ]
    if facts.resolved is None:
        return [
            MasterCheck(
                "FAIL",
                f"MASTER_ADDR={addr} does not resolve here ({facts.resolve_error})",
                "use a name every node resolves (check /etc/hosts and DNS on each node) or its IP address",
            )
        ]
    out.append(MasterCheck("PASS", f"MASTER_ADDR={addr} resolves to {facts.resolved}"))
    if is_loopback(facts.resolved):
        if facts.multi_node:
            out.append(
                MasterCheck(
                    "FAIL",
                    f"MASTER_ADDR={addr} is a loopback address on a multi-node job: the other nodes "
                    "would connect to themselves",
                    "set MASTER_ADDR to the first node's routable name or address "
                    "(`rankscope net ifaces` on it shows which)",
                )
            )
        else:
            out.append(MasterCheck("PASS", "loopback is fine for a single-node job"))
    if port is None:
        out.append(
            MasterCheck(
                "FAIL",
                "MASTER_PORT is not set",
                "export MASTER_PORT=29500 (any free port), or pass --master-port PORT",
            )
        )
        return out
    if facts.local:
        if facts.bind_errno == 0:
            out.append(MasterCheck("PASS", f"port {port} is free here: rank 0 can listen on it"))
        elif facts.bind_errno == errno.EADDRINUSE:
            out.append(
                MasterCheck(
                    "WARN",
                    f"port {port} is already in use on this node (the master node): a job already "
                    "running, or one that did not exit, holds it",
                    f"find it with `ss -ltnp 'sport = :{port}'`; stop it or pick another MASTER_PORT",
                )
            )
        else:
            out.append(
                MasterCheck(
                    "FAIL",
                    f"cannot bind port {port} here: {os_error(facts.bind_errno)}",
                    "pick a MASTER_PORT above 1024 that you may bind",
                )
            )
        return out
    verdict = facts.verdict or Verdict.ERROR
    meaning, fix = (s.format(host=facts.resolved, port=port) for s in MEANING[verdict])
    if verdict is Verdict.OPEN:
        out.append(MasterCheck("PASS", f"{addr}:{port} is open: the master is listening"))
    elif verdict is Verdict.REFUSED:
        out.append(
            MasterCheck(
                "PASS",
                f"{addr}:{port} refused: the master node is reachable and the port is not filtered; "
                "nothing listens yet (fine before rank 0 starts)",
            )
        )
    else:
        detail = f" ({facts.detail})" if facts.detail else ""
        out.append(MasterCheck("FAIL", f"{addr}:{port} {verdict}{detail}: {meaning}", fix))
    return out


def os_error(code: Optional[int]) -> str:
    import os

    return os.strerror(code) if code else "unknown error"


def gather_master(addr: str, port: Optional[int], multi: bool, timeout: float = 3.0) -> MasterFacts:
    """Resolve ``addr``; bind the port if it is this node's address, else probe it."""
    facts = MasterFacts(addr, port, multi)
    if not addr:
        return facts
    answer, error = resolve_all([addr], timeout)[addr]
    if answer is None:
        return MasterFacts(addr, port, multi, None, error)
    family, address = answer
    local, bind_errno = _try_bind(family, address, port or 0)
    if local or port is None:
        return MasterFacts(addr, port, multi, address, local=local, bind_errno=bind_errno if local else None)
    result = probe([Target(address, port)], timeout)[0]
    return MasterFacts(addr, port, multi, address, verdict=result.verdict, detail=result.detail)


def _try_bind(family: int, address: str, port: int) -> tuple[bool, int]:
    """(is ``address`` this node's, errno of binding ``port`` on it: 0 when free)."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As torch's TCPStore does: a port left in TIME_WAIT by a previous job is still free to use.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
            return True, 0
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False, exc.errno
            return True, exc.errno or 0

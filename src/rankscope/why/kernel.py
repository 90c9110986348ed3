"""Kernel messages about a job's processes and GPUs (pure): OOM-killer kills, segfaults, NVIDIA Xid.

Reads the text of ``dmesg`` (``[  123.456789] msg``, ``--time-format iso``) or ``journalctl -k``
(``2026-11-26T00:12:03+0000 host kernel: msg``). The forms recognised are the kernel's own
(mm/oom_kill.c: ``Out of memory: Killed process PID (comm)``, ``oom-kill:...,pid=PID,...``;
arch/x86/mm/fault.c: ``comm[PID]: segfault at ADDR ip ... error N in lib``; traps.c:
``traps: comm[PID] general protection fault``) and NVIDIA's driver's (``NVRM: Xid (PCI:BUS): N,
pid=PID, name=comm, text``), whose numbers NVIDIA's Xid catalogue explains (:data:`XID_WORDS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Optional

from rankscope.logs.kernel_oom import OOM as _OOM
from rankscope.logs.kernel_oom import OOM_SUMMARY as _OOM_SUMMARY
from rankscope.logs.kernel_xid import XID as _XID
from rankscope.why.report import KernelEvent

_PREFIX = re.compile(
    r"^(?:\[\s*(?P<mono>\d+\.\d+)\]\s*"
    r"|(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?)\s+(?:\S+\s+kernel:\s*)?)"
)
_SEGV = re.compile(r"(?P<comm>[^\s\[]+)\[(?P<pid>\d+)\]: segfault at (?P<addr>\S+)(?:.*? in (?P<lib>\S+))?")
_TRAP = re.compile(r"traps: (?P<comm>[^\s\[]+)\[(?P<pid>\d+)\] (?P<what>general protection fault|trap [^ ]+)")


def _pid(text: Optional[str]) -> Optional[int]:
    return int(text) if text and text.isdigit() else None


def parse_kernel(lines: Iterable[str]) -> list[KernelEvent]:
    """The OOM kills, segfaults, traps and Xids in kernel message lines (others are skipped)."""
    events: list[KernelEvent] = []
    oom_pids: set[int] = set()
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        prefix = _PREFIX.match(line)
        time = None
        body = line
        if prefix is not None:
            time = prefix.group("iso") or (
                f"{prefix.group('mono')} s after boot" if prefix.group("mono") else None
            )
            body = line[prefix.end() :]
        oom = _OOM.search(body) or _OOM_SUMMARY.search(body)
        if oom is not None:
            pid = int(oom.group("pid"))
            if pid in oom_pids:  # both forms of one kill: one event, in the words "Killed process ..."
                if _OOM.search(body):
                    same = next(e for e in events if e.kind == "oom_kill" and e.pid == pid)
                    same.text = body.strip()
                continue
            oom_pids.add(pid)
            events.append(KernelEvent("oom_kill", body.strip(), pid, time, line=number))
            continue
        segv = _SEGV.search(body)
        if segv is not None:
            events.append(KernelEvent("segfault", body.strip(), int(segv.group("pid")), time, line=number))
            continue
        trap = _TRAP.search(body)
        if trap is not None:
            events.append(KernelEvent("segfault", body.strip(), int(trap.group("pid")), time, line=number))
            continue
        xid = _XID.search(body)
        if xid is not None:
            events.append(
                KernelEvent("xid", body.strip(), _pid(xid.group("pid")), time, int(xid.group("xid")), number)
            )
    return events

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
from rankscope.why.report import KernelEvent

_PREFIX = re.compile(
    r"^(?:\[\s*(?P<mono>\d+\.\d+)\]\s*"
    r"|(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?)\s+(?:\S+\s+kernel:\s*)?)"
)
_SEGV = re.compile(r"(?P<comm>[^\s\[]+)\[(?P<pid>\d+)\]: segfault at (?P<addr>\S+)(?:.*? in (?P<lib>\S+))?")
_TRAP = re.compile(r"traps: (?P<comm>[^\s\[]+)\[(?P<pid>\d+)\] (?P<what>general protection fault|trap [^ ]+)")
_XID = re.compile(
    r"NVRM: Xid \((?P<bus>[^)]*)\): (?P<xid>\d+)(?:, pid=(?P<pid>\d+|'<unknown>'|<unknown>))?"
    r"(?:, name=(?P<comm>[^,]*))?(?:, (?P<rest>.*))?"
)

#: What an Xid means, in short (NVIDIA's Xid catalogue); the ones that break a training job.
XID_WORDS: dict[int, str] = {
    13: "graphics engine exception (an illegal address or instruction in a kernel)",
    31: "GPU memory page fault (a kernel accessed an invalid address)",
    43: "GPU stopped processing (the application hit a fault; the GPU is healthy)",
    45: "preemptive cleanup (a consequence of an earlier error)",
    48: "double-bit ECC error (uncorrectable memory error: reset the GPU)",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the application that used the memory must restart)",
    95: "uncontained ECC error (reset the GPU; every application on it is affected)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed (the GPU needs a reset or a reboot)",
}
#: Xids that are a consequence of something else (a victim's, not a cause).
XID_CONSEQUENCE = frozenset({43, 45})
#: Xids about the GPU's memory (ECC).
XID_ECC = frozenset({48, 63, 64, 92, 94, 95})


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


def xid_words(xid: int) -> str:
    return XID_WORDS.get(xid, "see NVIDIA's Xid catalogue")


#: Xids a program causes on a healthy GPU: a kernel's illegal address or instruction (13, 31), the GPU
#: stopping the faulting program's work (43), the driver's cleanup after it (45).
XID_PROGRAM = frozenset({13, 31, 43, 45})
_PROGRAM_STEP = (
    "the program's own fault, not the GPU's: the rank's CUDA error in the job's output (`rankscope logs "
    "errors`) is the cause; to find the kernel launch that caused it, rerun with synchronous launches "
    "(`rankscope rerun --sync -- <the job's command>`)"
)
_HARDWARE_STEP = (
    "on that node: `nvidia-smi -q` (ECC errors, remapped rows, retired pages) or `rankscope doctor`; an "
    "uncorrectable ECC, NVLink or bus error needs a GPU reset or the node drained"
)


def xid_step(xid: int) -> str:
    """What to do after an Xid: read the program's error for the ones a program causes, check the GPU
    for the others."""
    return _PROGRAM_STEP if xid in XID_PROGRAM else _HARDWARE_STEP

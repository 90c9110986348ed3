"""NVIDIA's driver's Xid lines (pure; shared by `logs errors` and `why`'s kernel messages).

The driver writes ``NVRM: Xid (PCI:0000:9d:00): 79, pid=77304, name=python3, GPU has fallen off the
bus.`` to the kernel log; users paste it from ``dmesg`` beside a job's output, where the CUDA error it
caused (``unspecified launch failure``, ``an illegal memory access``) names no hardware. NVIDIA's Xid
catalogue says what each number means (:data:`XID_WORDS`): some a program causes on a healthy GPU
(:data:`XID_PROGRAM`), the others a fault of the GPU, its memory or its bus.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

XID = re.compile(
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


class XidLine(NamedTuple):
    xid: int
    pid: Optional[int]
    #: The process's name where the driver gives it.
    comm: str


def xid_line(text: str) -> Optional[XidLine]:
    """The Xid an ``NVRM: Xid`` line reports; None for any other line."""
    found = XID.search(text)
    if found is None:
        return None
    pid = found.group("pid")
    return XidLine(
        int(found.group("xid")),
        int(pid) if pid and pid.isdigit() else None,
        (found.group("comm") or "").strip(),
    )


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

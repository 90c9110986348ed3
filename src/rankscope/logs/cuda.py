"""CUDA facts in a crash log: asynchronous error reports, device-side assertions, out-of-memory numbers.

- torch adds to every CUDA error it raises: "CUDA kernel errors might be asynchronously reported
  at some other API call, so the stacktrace below might be incorrect." The Python line shown is
  where the error was *noticed*, not where the faulty kernel was launched; rerunning with
  ``CUDA_LAUNCH_BLOCKING=1`` makes every launch synchronous, so the traceback points at it.
- A kernel's ``assert`` prints one line per failing GPU thread before that error:
  ``FILE.cu:LINE: KERNEL: block: [x,y,z], thread: [x,y,z] Assertion `COND` failed.`` They are
  folded here: one entry per (file, line, kernel, condition) with its thread and rank counts.
- ``torch.OutOfMemoryError`` carries the sizes: asked, the GPU's capacity, free, and what
  PyTorch allocated and reserved (two message forms: torch >= 2.1 and before).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from rankscope.logs.labels import fold_labels
from rankscope.logs.prefixes import SourceLabels, split_line
from rankscope.logs.tracebacks import RankTraceback

ASYNC_NOTE = "CUDA kernel errors might be asynchronously reported"
ASSERT_NEEDLE = b"] Assertion `"
_ASSERT = re.compile(
    rb"(?P<file>\S+?):(?P<line>\d+): (?P<kernel>.*?): block: \[(?P<block>[\d,]+)\], "
    rb"thread: \[[\d,]+\] Assertion `(?P<condition>.*)` failed"
)
#: Blocks listed per assertion at most (one line per thread; a grid has many blocks).
MAX_BLOCKS = 8


#: CUDA errors that a runtime call returns itself (no kernel involved), though torch adds its note that
#: kernel errors may be reported asynchronously to every CUDA error: where they are raised is where they
#: happened (seen on an H100: ``set_device(1)`` on a one-GPU node).
_SYNCHRONOUS = (
    "invalid device ordinal",
    "no kernel image is available",
    "driver version is insufficient",
    "CUDA-capable devices are busy or unavailable",
)


def is_async_cuda_error(tb: RankTraceback) -> bool:
    """torch's note that this CUDA error may have been raised far from the kernel that caused it (not
    for the errors a runtime call returns itself: :data:`_SYNCHRONOUS`)."""
    if any(words in tb.exception for words in _SYNCHRONOUS):
        return False
    return ASYNC_NOTE in tb.exception or any(ASYNC_NOTE in line for line in tb.tail)


#: CUDA errors that are the GPU's hardware failing, not a kernel of the program (cudaErrorECCUncorrectable,
#: cudaErrorNvlinkUncorrectable, cudaErrorHardwareStackError): no rerun finds them in the code.
_HARDWARE = (
    "uncorrectable ECC error encountered",
    "uncorrectable NVLink error detected",
    "hardware stack error",
)
HARDWARE_STEP = (
    "a hardware fault of this rank's GPU, not of the code: on its node check `nvidia-smi -q` (its "
    "ECC Errors and Remapped Rows) and the kernel log for NVIDIA Xid (48: double-bit ECC, 63/64: row remapping, "
    "74: NVLink, 79: fell off the bus), or run `rankscope doctor` there; drain the node and resume from "
    "the last checkpoint on others"
)

#: The next step for a CUDA error reported asynchronously (not a hardware fault): the traceback's line
#: is where CUDA noticed it, and only synchronous launches show the kernel that caused it.
ASYNC_STEP = (
    "CUDA reports kernel errors asynchronously: the line named is where the error was noticed, not "
    "necessarily the launch that caused it; rerun with synchronous launches to find that launch: "
    "`rankscope rerun --sync -- <the job's command>` (CUDA_LAUNCH_BLOCKING=1; one rank is enough)"
)


def gpu_hardware_error(tb: RankTraceback) -> Optional[str]:
    """The hardware failure a CUDA error names (``uncorrectable ECC error encountered``), else None."""
    for text in (tb.exception, *tb.tail):
        found = next((words for words in _HARDWARE if words in text), None)
        if found is not None:
            return found
    return None


def rerun_command(tb: RankTraceback, launcher: str) -> str:
    """The command line to rerun with synchronous kernel launches (the script from the outermost frame)."""
    scripts = [f.filename for f in tb.frames if f.function == "<module>" and not f.filename.startswith("<")]
    script = scripts[-1] if scripts else "your_script.py"
    return f"CUDA_LAUNCH_BLOCKING=1 {launcher} {script} ..."


@dataclass
class DeviceAssert:
    """One failing assertion in a kernel, all its threads and ranks folded."""

    file: str
    line: int
    kernel: str
    condition: str
    #: How many assertion lines (one per failing GPU thread) were printed.
    threads: int
    #: The blocks named (the first few, ``5,0,0``).
    blocks: list[str]
    #: The ranks folded, and one by one.
    ranks: str
    labels: list[Optional[str]]

    def text(self) -> str:
        """The assertion in one sentence: where in the kernel, which condition, how many threads."""
        blocks = ", ".join(f"[{b}]" for b in self.blocks)
        named = any(label is not None for label in self.labels)
        who = f"on {len(self.labels)} rank(s) {self.ranks}" if named else "(lines without a rank prefix)"
        return (
            f"device-side assertion, {self.threads} GPU thread(s) {who}: {self.file}:{self.line} in "
            f"{self.kernel}: `{self.condition}` failed (blocks {blocks})"
        )


def asserts_of(labels: Iterable[Optional[str]], asserts: list[DeviceAssert]) -> list[DeviceAssert]:
    """The assertions printed by the ranks ``labels`` (an error group's ranks)."""
    mine = set(labels)
    return [a for a in asserts if mine.intersection(a.labels)]


@dataclass
class _Assertion:
    threads: int = 0
    blocks: list[bytes] = field(default_factory=list)
    labels: dict[Optional[bytes], None] = field(default_factory=dict)


class DeviceAsserts:
    """Collects device-side assertion lines from blocks of whole lines (one ``bytes.find`` per block
    that holds a backquote)."""

    def __init__(self) -> None:
        self._found: dict[tuple[bytes, int, bytes, bytes], _Assertion] = {}

    def feed(self, chunk: bytes, labels: SourceLabels) -> None:
        # "`" is rare in logs and found with memchr, 8x faster than the whole needle
        pos = chunk.find(ASSERT_NEEDLE) if b"`" in chunk else -1
        while pos >= 0:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            split = split_line(chunk[start:end], labels.allow_srun, labels.dialect)
            match = _ASSERT.search(split.text)
            if match is not None:
                key = (match["file"], int(match["line"]), match["kernel"], match["condition"])
                found = self._found.setdefault(key, _Assertion())
                found.threads += 1
                if len(found.blocks) < MAX_BLOCKS and match["block"] not in found.blocks:
                    found.blocks.append(match["block"])
                found.labels.setdefault(labels.label(split.label), None)
            pos = chunk.find(ASSERT_NEEDLE, end)

    def result(self) -> list[DeviceAssert]:
        out = []
        for (file, line, kernel, condition), found in self._found.items():
            labels = list(found.labels)
            out.append(
                DeviceAssert(
                    file=file.decode("utf-8", "replace"),
                    line=line,
                    kernel=kernel.decode("utf-8", "replace"),
                    condition=condition.decode("utf-8", "replace"),
                    threads=found.threads,
                    blocks=[b.decode() for b in found.blocks],
                    ranks=fold_labels(labels),
                    labels=[None if label is None else label.decode("utf-8", "replace") for label in labels],
                )
            )
        return sorted(out, key=lambda a: -a.threads)


_SIZE = r"[\d.]+ (?:bytes|[KMGTP]iB)"
_OOM_FIELDS = {
    "asked": re.compile(rf"Tried to allocate ({_SIZE})"),
    "gpu": re.compile(r"\bGPU (\d+)"),
    "capacity": re.compile(rf"total capacity of ({_SIZE})|({_SIZE}) total capacity"),
    "free": re.compile(rf"of which ({_SIZE}) is free|({_SIZE}) free"),
    "process_in_use": re.compile(rf"this process has ({_SIZE}) memory in use"),
    "allocated": re.compile(rf"({_SIZE}) is allocated by PyTorch|({_SIZE}) already allocated"),
    "reserved_unallocated": re.compile(rf"({_SIZE}) is reserved by PyTorch but unallocated"),
    "reserved": re.compile(rf"({_SIZE}) reserved in total by PyTorch"),
}
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}


@dataclass
class OutOfMemory:
    """The numbers of a CUDA out-of-memory error, as torch wrote them (``"400.00 GiB"``)."""

    asked: Optional[str] = None
    gpu: Optional[int] = None
    capacity: Optional[str] = None
    free: Optional[str] = None
    #: Everything this process holds on the GPU, PyTorch's and other libraries' (torch >= 2.1).
    process_in_use: Optional[str] = None
    allocated: Optional[str] = None
    #: Cached by PyTorch's allocator but not in use by tensors (torch >= 2.1).
    reserved_unallocated: Optional[str] = None
    #: All PyTorch reserved, allocated included (before torch 2.1).
    reserved: Optional[str] = None

    @property
    def larger_than_gpu(self) -> bool:
        asked, capacity = size_bytes(self.asked), size_bytes(self.capacity)
        return asked is not None and capacity is not None and asked > capacity

    def summary(self) -> str:
        gpu = f" on GPU {self.gpu}" if self.gpu is not None else ""
        parts = [f"asked {self.asked or '?'}{gpu}"]
        if self.capacity:
            parts.append(f"capacity {self.capacity}")
        if self.free:
            parts.append(f"free {self.free}")
        torch_parts = [
            f"{what} {value}"
            for what, value in (
                ("allocated", self.allocated),
                ("reserved (total)", self.reserved),
                ("reserved but unallocated", self.reserved_unallocated),
            )
            if value
        ]
        text = ", ".join(parts)
        if torch_parts:
            text += "; PyTorch " + ", ".join(torch_parts)
        if self.process_in_use:
            text += f"; this process holds {self.process_in_use}"
        if self.larger_than_gpu:
            text += " — the request alone is larger than the whole GPU (a wrong size, or a tensor to shard)"
        return text


def size_bytes(size: Optional[str]) -> Optional[float]:
    if not size:
        return None
    number, _, unit = size.partition(" ")
    try:
        return float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        return None


def out_of_memory(tb: RankTraceback) -> Optional[OutOfMemory]:
    """The numbers of a CUDA out-of-memory error, or None for any other error."""
    return oom_numbers(tb.exception)


def short_oom(exception: str) -> Optional[str]:
    """``torch.OutOfMemoryError: CUDA out of memory (asked 4.00 GiB on GPU 1, ...)``: the numbers in
    place of torch's long text, for an out-of-memory exception line; None for any other."""
    oom = oom_numbers(exception)
    if oom is None:
        return None
    return f"{exception.split(':', 1)[0]}: CUDA out of memory ({oom.summary()})"


def oom_numbers(exception: str) -> Optional[OutOfMemory]:
    """The numbers of a CUDA out-of-memory exception line, or None for any other."""
    if "CUDA out of memory" not in exception:
        return None
    found: dict[str, str] = {}
    for name, pattern in _OOM_FIELDS.items():
        match = pattern.search(exception)
        if match is not None:
            found[name] = next(group for group in match.groups() if group)
    gpu = found.pop("gpu", None)
    return OutOfMemory(gpu=int(gpu) if gpu is not None else None, **found)

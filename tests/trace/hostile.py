"""A generator of trace files for the reader tests: well-formed ones of any size, and hostile ones.

Everything is written from the format's own definitions (src/rankscope/trace/format.py), so a
file is exactly what a writer (or an attacker who read the format) could leave under a trace name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from rankscope.trace import format as fmt

MAIN = 7  # the thread that started tracing, in META
OTHER = 9
META: dict[str, Any] = {
    "host": "n1",
    "rank": 0,
    "pid": 4242,
    "thread": MAIN,
    "clock_ns": 1,
    "hook": "monitoring",
}
#: code ids 1..3, one function each
NAMES = b"1\t/job/train.py\t10\tstep\n2\t/job/train.py\t20\twait_for_others\n3\t/job/loader.py\t5\tfetch\n"


def header(
    *,
    capacity: int,
    ring: bool = True,
    meta: bytes = b"",
    names_bytes: int = fmt.DEFAULT_NAMES_BYTES,
    names_used: int = len(NAMES),
    version: int = fmt.VERSION,
    meta_len: Optional[int] = None,
) -> bytes:
    page = bytearray(fmt.HEADER_SIZE)
    blob = meta or json.dumps(META).encode()
    fmt.HEADER.pack_into(
        page,
        0,
        fmt.MAGIC,
        version,
        (fmt.FLAG_RING if ring else 0) | fmt.FLAG_CALLS,
        fmt.RECORD_WORDS,
        capacity if ring else 0,
        names_bytes,
        names_used,
        0,
        len(blob) if meta_len is None else meta_len,
    )
    page[fmt.META_OFFSET : fmt.META_OFFSET + min(len(blob), fmt.META_MAX)] = blob[: fmt.META_MAX]
    return bytes(page)


def records(count: int, *, thread: int = MAIN, first_time: int = 1000) -> bytes:
    """``count`` records of ``thread``: call step, return step, call step, ... (times increasing)."""
    words = array("Q", bytes(24 * count))
    for i in range(count):
        words[3 * i] = first_time + i
        words[3 * i + 1] = (1 << 32) | (10 << 8) | (fmt.CALL if i % 2 == 0 else fmt.RETURN)
        words[3 * i + 2] = thread
    return words.tobytes()


def one(t: int, code_id: int, kind: int, thread: int) -> bytes:
    return array("Q", [t, (code_id << 32) | kind, thread]).tobytes()


def write(path: Path, *parts: bytes, size: Optional[int] = None) -> Path:
    """``parts`` written one after the other; ``size``: then made that long (sparse)."""
    with open(path, "wb") as handle:
        for part in parts:
            handle.write(part)
        if size is not None:
            handle.truncate(size)
    return path


def names_region(names: bytes = NAMES, size: int = fmt.DEFAULT_NAMES_BYTES) -> bytes:
    return names + bytes(size - len(names))


def ring_file(path: Path, capacity: int, body: bytes, rank: int = 0) -> Path:
    """A ring of ``capacity`` slots whose first slots hold ``body`` (the rest never written)."""
    return write(
        path,
        header(capacity=capacity, meta=json.dumps({**META, "rank": rank}).encode()),
        names_region(),
        body,
        size=fmt.HEADER_SIZE + fmt.DEFAULT_NAMES_BYTES + capacity * fmt.RECORD_BYTES,
    )


@dataclass(frozen=True)
class Measured:
    returncode: int
    stderr: str
    #: the command's peak resident set size, in MiB
    peak_mib: float
    stdout_lines: int
    #: the output itself when it is under 1 MiB, else its last line
    stdout: str


def run_measured(tmp_path: Path, *args: str, timeout: float = 300) -> Measured:
    """``rankscope ARGS`` in a fresh wrapper process whose only child it is, so the wrapper's
    ``RUSAGE_CHILDREN`` peak is the command's own; stdout goes to a file (it may be large)."""
    out = tmp_path / f"stdout-{len(list(tmp_path.glob('stdout-*')))}"
    wrapper = (
        "import resource, subprocess, sys\n"
        "with open(sys.argv[1], 'wb') as out:\n"
        "    rc = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, str(out), sys.executable, "-m", "rankscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    rc, kib = proc.stdout.split()
    small = out.stat().st_size < 1 << 20
    lines, kept = 0, b""
    with open(out, "rb") as handle:
        for line in handle:
            lines += 1
            kept = kept + line if small else line
    os.unlink(out)
    return Measured(int(rc), proc.stderr, int(kib) / 1024, lines, kept.decode())

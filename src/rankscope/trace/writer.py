"""The trace file of one process: a memory-mapped header, names region and ring (or appended records).

Runs inside the traced process (Python 3.9, standard library only). The ring is a
``memoryview`` over the mmap cast to unsigned 64-bit words, so an event is three item stores and no
allocation; the pages belong to the kernel's page cache, so the last events survive SIGKILL or a
segfault of the process (and a node reboot once the kernel has written them back).
"""

from __future__ import annotations

import json
import mmap
import os
import struct

from rankscope.trace import format as fmt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

#: Records buffered in memory by ``--full`` before one write (1.5 MiB).
FULL_CHUNK_RECORDS = 1 << 16


def trace_name(host: str, rank: Optional[int], pid: int) -> str:
    """``trace-{host}-{rank}-{pid}`` (``x`` for a process without a rank)."""
    return f"trace-{host}-{'x' if rank is None else rank}-{pid}"


class TraceFile:
    """One open trace file. ``words`` is the record area as 64-bit words (a chunk buffer in full mode)."""

    def __init__(
        self,
        path: str,
        *,
        ring: bool,
        capacity: int,
        names_bytes: int,
        flags: int,
        meta: dict[str, Any],
    ) -> None:
        self.path = path
        self.ring = ring
        self.capacity = capacity if ring else 0
        self.names_bytes = names_bytes
        self.names_used = 0
        self.wraps = 0
        records_bytes = capacity * fmt.RECORD_BYTES if ring else 0
        size = fmt.HEADER_SIZE + names_bytes + records_bytes
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.file_offset = size  # where full mode appends
        blob = json.dumps(meta, separators=(",", ":")).encode()[: fmt.META_MAX]
        fmt.HEADER.pack_into(
            self.mm,
            0,
            fmt.MAGIC,
            fmt.VERSION,
            flags,
            fmt.RECORD_WORDS,
            self.capacity,
            names_bytes,
            0,
            0,
            len(blob),
        )
        self.mm[fmt.META_OFFSET : fmt.META_OFFSET + len(blob)] = blob
        start = fmt.HEADER_SIZE + names_bytes
        if ring:
            self._view = memoryview(self.mm)[start : start + records_bytes]
            self.words = self._view.cast("Q")
        else:
            self._chunk = bytearray(FULL_CHUNK_RECORDS * fmt.RECORD_BYTES)
            self._view = memoryview(self._chunk)
            self.words = self._view.cast("Q")
        self.end = len(self.words)

    def add_name(self, code_id: int, filename: str, line: int, name: str) -> None:
        """Record what ``code_id`` means (dropped silently once the names region is full)."""
        text = f"{code_id}\t{filename}\t{line}\t{name}\n".encode("utf-8", "replace")
        used = self.names_used
        if used + len(text) > self.names_bytes:
            return
        at = fmt.HEADER_SIZE + used
        self.mm[at : at + len(text)] = text
        self.names_used = used + len(text)
        struct.pack_into("<Q", self.mm, fmt.NAMES_USED_OFFSET, self.names_used)

    def wrapped(self) -> int:
        """The ring is full: count the wrap and go back to its start. Returns the next write index."""
        self.wraps += 1
        struct.pack_into("<Q", self.mm, fmt.WRAPS_OFFSET, self.wraps)
        self.recalibrate()
        return 0

    #: () -> (stamp, ns) when records carry CPU counter stamps (set by the tracer), else None
    calibrate: Optional[Callable[[], tuple[int, int]]] = None
    _first: Optional[tuple[int, int]] = None

    def use_ticks(self, calibrate: Callable[[], tuple[int, int]]) -> None:
        """Records are stamped with CPU counter ticks: flag it and keep the calibration pairs."""
        self.calibrate = calibrate
        flags = struct.unpack_from("<I", self.mm, 12)[0] | fmt.FLAG_TICKS
        struct.pack_into("<I", self.mm, 12, flags)
        self._first = calibrate()
        self.recalibrate()

    def recalibrate(self) -> None:
        if self.calibrate is not None and self._first is not None:
            latest = self.calibrate()
            fmt.CALIBRATION.pack_into(self.mm, fmt.CALIBRATION_OFFSET, *self._first, *latest)

    def flush_chunk(self, used: Optional[int] = None) -> int:
        """Full mode: append the buffered records (``used`` words of them) to the file."""
        count = self.end if used is None else used
        data = self._chunk[: count * 8]  # a copy: other threads may write into the buffer meanwhile
        os.pwrite(self.fd, data, self.file_offset)
        self.file_offset += len(data)
        return 0

    def close(self, used: int) -> None:
        """Write what full mode still buffers and push the pages to the file.

        The mapping itself stays open: a thread that has not seen the stop yet may still write an
        event into it, which must never fail inside the traced program.
        """
        if not self.ring and used:
            self.flush_chunk(used)
        self.recalibrate()
        self.mm.flush()

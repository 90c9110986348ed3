"""The trace file of one process: a memory-mapped header, names region and ring (or appended records).

Runs inside the traced process (Python 3.9, standard library only). The ring is a
``memoryview`` over the mmap cast to unsigned 64-bit words, so an event is three item stores and no
allocation; the pages belong to the kernel's page cache, so the last events survive SIGKILL or a
segfault of the process (and a node reboot once the kernel has written them back).

Every byte of the mapping is allocated on disk (``posix_fallocate``) before it is mapped: a store
into a mapped page the filesystem has no room for kills the process with SIGBUS, so a full
filesystem must fail here, at start, where it is one ``OSError``. ``--full`` allocates each chunk
the same way before writing it. Once tracing runs, nothing here raises: a failing write switches
the file off (:attr:`TraceFile.failed`) and tells :attr:`TraceFile.on_failure`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import struct

from rankscope.trace import format as fmt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

#: Records buffered in memory by ``--full`` before one write (1.5 MiB).
FULL_CHUNK_RECORDS = fmt.FULL_CHUNK_RECORDS
#: Zeros written at a time where the filesystem cannot ``fallocate``.
_ZEROS = 1 << 20


def allocate(fd: int, offset: int, length: int) -> None:
    """Reserve ``length`` bytes at ``offset`` on disk (the file grows to cover them), or raise OSError.

    Where the filesystem has no ``fallocate`` the bytes are written as zeros, which allocates them too.
    """
    if length <= 0:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, offset, length)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    zeros = bytes(min(length, _ZEROS))
    done = 0
    while done < length:
        done += _written(os.pwrite(fd, zeros[: length - done], offset + done))


def _written(count: int) -> int:
    """What one ``pwrite`` wrote; none at all is an error (a loop must not spin on it)."""
    if count <= 0:
        raise OSError(errno.EIO, "nothing written")
    return count


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
        self.failed: Optional[str] = None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            allocate(fd, 0, size)  # before mapping: a full filesystem fails here, not with SIGBUS later
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            _remove_created(path, fd)
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

    #: called once with the reason when a write fails and the file switches itself off
    on_failure: Optional[Callable[[str], None]] = None

    def fail(self, exc: BaseException) -> None:
        """Switch the file off after ``exc`` (never raises): no more writes, one call of on_failure."""
        if self.failed is not None:
            return
        self.failed = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        callback = self.on_failure
        if callback is not None:
            with contextlib.suppress(Exception):
                callback(self.failed)

    def wrapped(self) -> int:
        """The ring is full: count the wrap and go back to its start. Returns the next write index."""
        try:
            self.wraps += 1
            struct.pack_into("<Q", self.mm, fmt.WRAPS_OFFSET, self.wraps)
            self.recalibrate()
        except Exception as exc:  # called from the hooks: never into the traced program
            self.fail(exc)
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
        """Full mode: append the buffered records (``used`` words of them) to the file.

        Called from the hooks, so it never raises: space for the chunk is allocated first (the file
        holds whole chunks or nothing of one), and any error switches the file off (the buffer is
        then reused and never written).
        """
        if self.failed is not None:
            return 0
        try:
            count = self.end if used is None else used
            data = self._chunk[: count * 8]  # a copy: other threads may write into the buffer meanwhile
            allocate(self.fd, self.file_offset, len(data))
            view = memoryview(data)
            done = 0
            while done < len(data):
                done += _written(os.pwrite(self.fd, view[done:], self.file_offset + done))
            self.file_offset += len(data)
        except Exception as exc:
            self.fail(exc)
        return 0

    def close(self, used: int) -> None:
        """Write what full mode still buffers and push the pages to the file (never raises).

        The mapping itself stays open: a thread that has not seen the stop yet may still write an
        event into it, which must never fail inside the traced program.
        """
        if not self.ring and used:
            self.flush_chunk(used)
        try:
            self.recalibrate()
            self.mm.flush()
        except Exception as exc:
            self.fail(exc)


def _remove_created(path: str, fd: int) -> None:
    """Remove the file this process just created at ``path`` (still the same file: never another one)."""
    try:
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass

"""Progress markers: ``rankscope.progress(step=..., **labels)`` records where a rank is in its loop.

Each call writes the step (and the labels that changed) into a small memory-mapped file of the
process (see :mod:`rankscope.inproc.runtime` for where), so ``rankscope stacks`` can show each
rank's step beside its stack, and the last step stays readable after the process died (the page is
the kernel's: a SIGKILL or a segfault does not lose it; a node reboot may). A call costs a few
hundred nanoseconds: the file is opened at the first call, and a call packs three numbers into the
mapping; labels are encoded only when they change.

Semantics: a call updates what it names. ``step`` (an int) replaces the step; labels are merged
into the current ones (``phase="backward"``), a label given as ``None`` is removed. The step is
kept when a call gives only labels. At most :data:`MAX_LABELS` labels, keys cut to
:data:`MAX_KEY` characters and values (``str()`` of them) to :data:`MAX_VALUE`.

File layout (little-endian, :data:`SIZE` bytes, version :data:`VERSION`):

====== ===================================================================================
offset what
====== ===================================================================================
0      magic ``RSPROGR\\0``, u32 version, u32 file size, i64 pid, u64 process start time
       (clock ticks after boot, /proc/PID/stat field 22: tells a reused pid apart),
       i64 rank (-1: unknown), f64 creation time (epoch seconds)
64     host name, NUL-padded (64 bytes)
128    the state: u64 sequence (calls so far), f64 time of the last call, i64 step
       (INT64_MIN: none yet), u64 the same sequence again (a reader that sees two different
       sequences read a write half done and reads again)
192    the labels: u64 sequence, u32 length, then that many bytes of JSON (an object of strings)
====== ===================================================================================

Never raises into the job: any error turns the markers off for this process.
Python 3.9 compatible, standard library only.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rankscope.inproc import runtime

MAGIC = b"RSPROGR\0"
VERSION = 1
SIZE = 4096
NO_STEP = -(2**63)
MAX_LABELS = 16
MAX_KEY = 32
MAX_VALUE = 96

HEADER = struct.Struct("<8sIIqQqd")
HOST_AT, HOST_SIZE = 64, 64
STATE_AT = 128
STATE = struct.Struct("<QdqQ")
LABELS_AT = 192
LABELS_HEAD = struct.Struct("<QI")
LABELS_MAX = SIZE - LABELS_AT - LABELS_HEAD.size
#: Set by ``rankscope.trace`` while it traces this process: each step also goes into the trace ring.
trace_step: Optional[Callable[[Any], None]] = None


def self_start_ticks() -> int:
    """This process's start time in clock ticks after boot (0 when /proc does not say)."""
    return start_ticks("self")


def start_ticks(pid: Any) -> int:
    from rankscope import procfs

    return procfs.start_ticks(pid)


def _encode_labels(labels: dict[str, str]) -> bytes:
    items = list(labels.items())[:MAX_LABELS]
    while True:
        raw = json.dumps(dict(items), separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")
        if len(raw) <= LABELS_MAX or not items:
            return raw
        items.pop()


class _Writer:
    """The process's marker file; ``mark`` is what ``rankscope.progress`` is bound to."""

    __slots__ = ("_mm", "_seq", "_step", "_labels", "_last", "_path", "_off", "_pid", "_pack", "_now")

    def __init__(self) -> None:
        self._mm: Optional[mmap.mmap] = None
        self._seq = 0
        self._step = NO_STEP
        self._labels: dict[str, str] = {}
        #: The labels of the last call that gave any, as given: a call repeating them costs one comparison.
        self._last: dict[str, Any] = {}
        self._path: Optional[str] = None
        self._off = False
        self._pid = 0
        self._pack = STATE.pack_into
        self._now = time.time

    @property
    def path(self) -> Optional[str]:
        return self._path

    def mark(self, step: Optional[int] = None, **labels: Any) -> None:
        """Record ``step`` and ``labels``; never raises (see the module's docstring)."""
        try:
            note = trace_step
            if note is not None and step is not None:
                note(step)
            mm = self._mm
            if mm is None:
                if self._off:
                    return
                mm = self._open()
                if mm is None:
                    return
            if step is not None:
                if type(step) is not int:
                    step = int(step)
                self._step = step
            if labels and labels != self._last:
                self._set_labels(mm, labels)
            seq = self._seq + 1
            self._seq = seq
            self._pack(mm, STATE_AT, seq, self._now(), self._step, seq)
        except Exception:  # noqa: BLE001 - a marker never breaks a training step
            self._turn_off()

    def _set_labels(self, mm: mmap.mmap, labels: dict[str, Any]) -> None:
        self._last = labels
        current = dict(self._labels)
        for key, value in labels.items():
            key = str(key)[:MAX_KEY]
            if value is None:
                current.pop(key, None)
            elif len(current) < MAX_LABELS or key in current:
                current[key] = str(value)[:MAX_VALUE]
        if current == self._labels:
            return
        self._labels = current
        raw = _encode_labels(current)
        mm[LABELS_AT + LABELS_HEAD.size : LABELS_AT + LABELS_HEAD.size + len(raw)] = raw
        LABELS_HEAD.pack_into(mm, LABELS_AT, self._seq + 1, len(raw))

    def _open(self) -> Optional[mmap.mmap]:
        from rankscope.ranks import rank_from_env, short_hostname

        pid = os.getpid()
        host = short_hostname()
        rank = rank_from_env(os.environ, host).rank
        directory = runtime.runtime_dir(os.environ, os.getuid())
        try:
            dir_fd = runtime.open_private_dir(directory)
        except OSError:
            self._off = True
            return None
        name = runtime.file_name(host, pid, "progress", rank)
        try:
            fd = runtime.open_file(dir_fd, name, os.O_RDWR | os.O_TRUNC)
            try:
                # Blocks first: a page of a file system that is full would be SIGBUS at the first store.
                os.posix_fallocate(fd, 0, SIZE)
                mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)  # what could not be made whole is not left half made
            os.close(dir_fd)
            self._off = True
            return None
        os.close(dir_fd)
        HEADER.pack_into(
            mm, 0, MAGIC, VERSION, SIZE, pid, self_start_ticks(), -1 if rank is None else rank, time.time()
        )
        mm[HOST_AT : HOST_AT + HOST_SIZE] = host.encode("utf-8", "replace")[:HOST_SIZE].ljust(
            HOST_SIZE, b"\0"
        )
        STATE.pack_into(mm, STATE_AT, 0, 0.0, NO_STEP, 0)
        LABELS_HEAD.pack_into(mm, LABELS_AT, 0, 0)
        self._mm, self._pid = mm, pid
        self._path = os.path.join(directory, name)
        _register_cleanup(self)
        return mm

    def _turn_off(self) -> None:
        self._off = True
        self._mm = None

    def forget(self) -> None:
        """After fork: the child must not write into its parent's file; it opens its own at its next call."""
        self._mm, self._path, self._seq, self._off = None, None, 0, False
        self._labels, self._last = {}, {}

    def remove(self) -> None:
        """At a normal exit: the file is this process's to remove (a crash leaves it, readable).

        An exception the program did not catch is a crash too, though the interpreter exits
        normally (code 1): the file stays. Its launcher may reap the process before anyone reads
        that code (torchrun does within 0.1 s), and then the file is what tells a watcher that the
        rank died rather than finished. The interpreter sets ``sys.last_value`` when it prints
        such an exception, before the atexit handlers run.
        """
        path, mm = self._path, self._mm
        if path is None or self._pid != os.getpid() or getattr(sys, "last_value", None) is not None:
            return
        self._mm, self._path, self._off = None, None, True
        try:
            if mm is not None:
                mm.close()
            os.unlink(path)
        except (OSError, ValueError):
            pass


_cleanup_registered = False


def _register_cleanup(writer: _Writer) -> None:
    global _cleanup_registered
    if _cleanup_registered:
        return
    _cleanup_registered = True
    import atexit

    atexit.register(writer.remove)


WRITER = _Writer()
#: ``rankscope.progress``: a bound method, so a call costs one Python call and no lookup.
progress: Callable[..., None] = WRITER.mark
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WRITER.forget)


@dataclass
class ProgressRecord:
    """A marker file read back."""

    pid: int
    rank: Optional[int]
    host: str
    #: The last step given; ``None`` when only labels were.
    step: Optional[int]
    labels: dict[str, str] = field(default_factory=dict)
    #: Epoch seconds of the last call (0 when none yet) and of the file's creation.
    updated: float = 0.0
    created: float = 0.0
    calls: int = 0
    start_ticks: int = 0


def parse(raw: bytes) -> ProgressRecord:
    """Decode a marker file's bytes; ValueError when it is not one (or of a newer version)."""
    if len(raw) < LABELS_AT + LABELS_HEAD.size:
        raise ValueError(f"too short for a progress file ({len(raw)} bytes)")
    magic, version, size, pid, ticks, rank, created = HEADER.unpack_from(raw, 0)
    if magic != MAGIC:
        raise ValueError("not a rankscope progress file")
    if version != VERSION:
        raise ValueError(f"progress file version {version}, this rankscope reads {VERSION}")
    seq, updated, step, seq2 = STATE.unpack_from(raw, STATE_AT)
    if seq != seq2:
        raise ValueError("progress file caught mid-write")
    host = raw[HOST_AT : HOST_AT + HOST_SIZE].split(b"\0", 1)[0].decode("utf-8", "replace")
    _, length = LABELS_HEAD.unpack_from(raw, LABELS_AT)
    labels: dict[str, str] = {}
    if 0 < length <= LABELS_MAX:
        start = LABELS_AT + LABELS_HEAD.size
        try:
            decoded = json.loads(raw[start : start + length].decode("utf-8", "replace"))
        except ValueError:
            decoded = {}
        if isinstance(decoded, dict):
            labels = {str(k): str(v) for k, v in decoded.items()}
    return ProgressRecord(
        pid=pid,
        rank=None if rank < 0 else rank,
        host=host,
        step=None if step == NO_STEP else step,
        labels=labels,
        updated=updated,
        created=created,
        calls=seq,
        start_ticks=ticks,
    )


def read(path: str, attempts: int = 5, uid: Optional[int] = None) -> ProgressRecord:
    """Read a marker file (a write half done is read again); OSError or ValueError when it cannot be.

    Only a regular file (never through a link, never waiting on a FIFO), owned by ``uid`` when given.
    """
    error: Optional[ValueError] = None
    for _ in range(attempts):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise runtime.NotOwned(f"{path} is not a regular file")
            if uid is not None and st.st_uid != uid:
                raise runtime.NotOwned(f"{path} is owned by uid {st.st_uid}, not {uid}")
            raw = os.read(fd, SIZE)
        finally:
            os.close(fd)
        try:
            return parse(raw)
        except ValueError as exc:
            error = exc
            if "mid-write" not in str(exc):
                break
    assert error is not None
    raise error

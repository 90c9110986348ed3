"""Where the other ranks wait while one rank is in pdb, and how they learn it went on.

The n-th ``rankscope.breakpoint()`` call of every rank meets the n-th of the others: the ranks
that do not stop wait for a flag that the stopped rank sets when its pdb session ends (``c``,
``q``, a detach). The waiting ranks wait for the flag with no deadline of their own (or the one the
caller gives) instead of entering a collective, so no collective timeout (gloo's and NCCL's
30 minutes, or what ``init_process_group(timeout=...)`` set) runs out while a person reads code.

The flag lives in the job's own store when ``torch.distributed`` is already imported and its
default group initialised (any number of nodes), else in torchrun's store (``torch.distributed``
imported, the group not yet initialised: torchrun's workers share their agent's store, any number
of nodes), else in a file under a directory keyed by the job (one node, or a directory every node
shares: ``RANKSCOPE_BREAKPOINT_DIR``). A flag file older
than the waiting process is left over from an earlier job with the same key, and ignored; flag
files a day old are removed when a new flag is set.

Waiting polls (a store's ``check``, a file's ``stat``), never a store's timed ``wait``: silent in
the job's log, and nothing left pending in the store client when the process exits.

Imported inside training processes: Python 3.9, standard library only; torch only when the
program imported it already.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Callable, Optional

#: Seconds between polls of a flag (a file, or a key in a store): fast at first (a quick ``c``),
#: then every fifth of a second, or less often in a large job (:data:`POLLS_PER_SECOND`).
_FIRST_POLL = 0.05
_LAST_POLL = 0.2
#: Polls a second of all the waiting ranks together, at most, once they have waited a while: the
#: store's server answers them all (1024 ranks poll every 3.4 s).
POLLS_PER_SECOND = 300.0
#: The ranks go on together this long after the longest poll (and never more than 5 s) after a release.
_RELEASE_MARGIN = 0.1
_MAX_RELEASE_LEAD = 5.0
#: Seconds to reach torchrun's store (and for each request to it) before giving up on it.
AGENT_STORE_TIMEOUT = 10.0
#: Flag files older than this (seconds) are removed when a new flag is set: their job is long past them.
STALE_FLAG_AGE = 86400.0


class Flag:
    """One release flag: set by the stopped rank, awaited by the others. It also carries a note:
    the stopped rank's attach line, which a waiting rank shows where the stopped rank's own
    output is filtered away (torchrun --local-ranks-filter)."""

    where = ""

    def set(self, value: str = "") -> None:
        raise NotImplementedError

    def is_set(self) -> bool:
        raise NotImplementedError

    def value(self) -> str:
        """What the flag was set to (``""`` when unreadable)."""
        return ""

    def release(self, world: int) -> None:
        """Set the flag to a moment shortly ahead, by which every waiting rank has seen it, and
        wait for that moment: the ranks go on together. Ranks that reach their next collective
        far apart make a gloo job that never calls ``destroy_process_group()`` abort at exit
        far more often (torch's behaviour: a plain job whose ranks were 0.2 s apart did, in 2 of 5 runs)."""
        named = f"{time.time() + min(longest_poll(world) + _RELEASE_MARGIN, _MAX_RELEASE_LEAD):.3f}"
        self.set(named)
        _sleep_until(float(named))  # the moment as written (rounded), so no rank goes on before this one

    def post(self, note: str) -> None:
        raise NotImplementedError

    def note(self) -> Optional[str]:
        raise NotImplementedError

    def _deliver(self, on_note: Optional[Callable[[str], None]]) -> Optional[Callable[[str], None]]:
        """Hand the note to ``on_note`` once it is there; the callback still owed (``None`` once given)."""
        if on_note is None:
            return None
        note = self.note()
        if note is None:
            return on_note
        on_note(note)
        return None

    def wait(
        self,
        timeout: Optional[float] = None,
        on_note: Optional[Callable[[str], None]] = None,
        world: int = 1,
    ) -> bool:
        """Poll until the flag is set (True) or ``timeout`` seconds have passed (False); the
        ``world`` ranks of the job that wait together ask at most :data:`POLLS_PER_SECOND` times a second."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _FIRST_POLL
        longest = longest_poll(world)
        while not self.is_set():
            on_note = self._deliver(on_note)
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 1.5, longest)
        with contextlib.suppress(ValueError):
            _sleep_until(float(self.value() or "0"))
        return True


def longest_poll(world: int) -> float:
    """Seconds between a waiting rank's polls, once it has waited a while, in a job of ``world`` ranks."""
    return max(_LAST_POLL, world / POLLS_PER_SECOND)


def _sleep_until(at: float) -> None:
    """Sleep until ``at`` (seconds since the epoch), unless it is past or implausibly far (a skewed clock)."""
    delay = at - time.time()
    if 0 < delay <= _MAX_RELEASE_LEAD:
        time.sleep(delay)


class StoreFlag(Flag):
    """A key in a ``torch.distributed`` store. Waiting polls it with ``check`` (one short request,
    answered at once), never with the store's timed ``wait``: each timed-out wait made torch log a
    warning in the job's output twice a second."""

    def __init__(self, store: Any, key: str) -> None:
        self._store = store
        self._key = key
        self.where = f"the job's store (key {key})"

    def set(self, value: str = "") -> None:
        self._store.set(self._key, value or "released")

    def value(self) -> str:
        return bytes(self._store.get(self._key)).decode("ascii", "replace")

    def is_set(self) -> bool:
        return bool(self._store.check([self._key]))

    def post(self, note: str) -> None:
        self._store.set(f"{self._key}/note", note)

    def note(self) -> Optional[str]:
        key = f"{self._key}/note"
        if not self._store.check([key]):
            return None
        return bytes(self._store.get(key)).decode("utf-8", "replace")


def _write_atomically(path: str, text: str) -> None:
    """``path`` holds ``text`` (private to this user), whole or not at all."""
    temporary = f"{path}.{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _remove_stale_flags(directory: str) -> None:
    """Remove this user's flag files in ``directory`` not touched for :data:`STALE_FLAG_AGE` seconds."""
    cutoff = time.time() - STALE_FLAG_AGE
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.endswith((".released", ".released.note")):
            continue
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if info.st_uid == os.getuid() and info.st_mtime < cutoff:
                os.unlink(path)


class FileFlag(Flag):
    """A file, created atomically; one older than the waiting process is an earlier job's."""

    def __init__(self, path: str, not_before: float) -> None:
        self._path = path
        self._not_before = not_before
        self.where = path

    def set(self, value: str = "") -> None:
        _write_atomically(self._path, value)
        _remove_stale_flags(os.path.dirname(self._path))

    def value(self) -> str:
        try:
            with open(self._path, encoding="ascii", errors="replace") as handle:
                return handle.read(64)
        except OSError:
            return ""

    def is_set(self) -> bool:
        return self._fresh(self._path)

    def _fresh(self, path: str) -> bool:
        try:
            return os.stat(path).st_mtime >= self._not_before
        except OSError:
            return False

    def post(self, note: str) -> None:
        _write_atomically(f"{self._path}.note", note)

    def note(self) -> Optional[str]:
        path = f"{self._path}.note"
        if not self._fresh(path):
            return None
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None


def default_store() -> Optional[Any]:
    """The default group's store, when the program imported torch.distributed and initialised it."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist.distributed_c10d._get_default_store()
    except Exception:  # a private helper: a torch without it means the file fallback
        return None


def group_rank() -> Optional[tuple[int, int]]:
    """(rank, world size) of the default group, when it is initialised."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        return None
    return None


def _start_time(pid: int) -> Optional[str]:
    from rankscope import procfs

    ticks = procfs.start_ticks(pid)
    return str(ticks) if ticks else None


def process_start(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (0.0 when unknown)."""
    from rankscope import procfs

    boot, after_boot = procfs.boot_time(), procfs.started_after_boot(pid)
    if boot is None or after_boot is None:
        return 0.0
    return boot + after_boot - 1.0  # btime is whole seconds


def job_key(env: Mapping[str, str]) -> str:
    """A name shared by the ranks of one job on one node, different for another job."""
    parts: list[str]
    if "TORCHELASTIC_RUN_ID" in env:  # torchrun: the workers of one node are children of one agent
        ppid = os.getppid()
        parts = [
            "torchrun",
            env["TORCHELASTIC_RUN_ID"],
            env.get("TORCHELASTIC_RESTART_COUNT", ""),
            str(ppid),
            _start_time(ppid) or "",
        ]
    elif "SLURM_JOB_ID" in env:
        parts = ["slurm", env["SLURM_JOB_ID"], env.get("SLURM_STEP_ID", "")]
    elif "MASTER_ADDR" in env and "MASTER_PORT" in env:
        parts = ["master", env["MASTER_ADDR"], env["MASTER_PORT"]]
    else:
        ppid = os.getppid()
        parts = ["parent", str(ppid), _start_time(ppid) or ""]
    return "-".join(part.replace("/", "_").replace(" ", "_") for part in parts)


def flag_directory(env: Mapping[str, str]) -> str:
    """``RANKSCOPE_BREAKPOINT_DIR``, else a private directory of this user under the temporary directory."""
    chosen = env.get("RANKSCOPE_BREAKPOINT_DIR", "").strip()
    if chosen:
        os.makedirs(chosen, mode=0o700, exist_ok=True)
        return chosen
    path = os.path.join(tempfile.gettempdir(), f"rankscope-breakpoint-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or info.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory of this user")
    return path


_agent_store: Optional[Any] = None


def agent_store(env: Mapping[str, str]) -> Optional[Any]:
    """torchrun's own store (which its workers share before ``init_process_group``), when the
    program imported torch.distributed and runs under torchrun; one connection per process."""
    global _agent_store
    if _agent_store is not None:
        return _agent_store
    dist = sys.modules.get("torch.distributed")
    port = env.get("MASTER_PORT", "")
    if dist is None or env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not port.isdigit():
        return None
    from datetime import timedelta

    host = env.get("MASTER_ADDR", "127.0.0.1")
    try:  # torch's own connect retries, logs a C++ trace per try, and takes twice its timeout
        socket.create_connection((host, int(port)), timeout=AGENT_STORE_TIMEOUT).close()
    except OSError as exc:
        raise OSError(f"torchrun's store at {host}:{port} cannot be reached: {exc.strerror or exc}") from None
    _agent_store = dist.TCPStore(
        host,
        int(port),
        is_master=False,
        timeout=timedelta(seconds=AGENT_STORE_TIMEOUT),
    )
    return _agent_store


def flag_for(call: int, env: Mapping[str, str], spans_nodes: bool) -> Optional[Flag]:
    """The flag of the ``call``-th breakpoint of this job: the default group's store, else
    torchrun's store, else a file. ``None`` when only a file is left and the job spans nodes
    without a directory they share. Raises (``OSError``, torch's errors) when no flag can be had.
    """
    store = default_store()
    if store is not None:
        return StoreFlag(store, f"rankscope/breakpoint/{call}")
    store = agent_store(env)
    if store is not None:
        attempt = f"{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return StoreFlag(store, f"rankscope/breakpoint/{attempt}/{call}")
    if spans_nodes and not env.get("RANKSCOPE_BREAKPOINT_DIR", "").strip():
        return None
    path = os.path.join(flag_directory(env), f"{job_key(env)}-{call}.released")
    return FileFlag(path, process_start(os.getpid()))

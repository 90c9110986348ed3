"""The only module of the watcher that reads the job: workers, markers, exit codes, output files, dumps.

Every read is of /proc or of a small file, with no child process: a look at a healthy 16-rank job
costs well under a millisecond per rank (bench/bench_watch.py). The process table is scanned only
to find the workers (at start, after a worker exits, and every ``rescan`` seconds), never per look.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from typing import Optional

from rankscope import procfs
from rankscope.inproc import progress as progress_file
from rankscope.inproc import runtime
from rankscope.procs import ProcessTable, launcher_kind, workers_of
from rankscope.ranks import short_hostname
from rankscope.watch.model import Exit, RankSample

#: The least time between two listings of a rank's runtime directory for a marker it does not have.
LIST_EVERY = 10.0
#: The in-process handler's dumps of a dying rank: the launcher's SIGTERM, and fatal signals.
DUMP_KINDS = ("term", "crash")


@dataclass
class Watched:
    """One worker of the job, as found; its marker's path once it has one."""

    pid: int
    rank: Optional[int]
    host: str
    uid: Optional[int]
    #: Its rankscope runtime directory (from its own environment and uid).
    directory: str
    start_ticks: int
    marker: Optional[str] = None
    #: A descriptor that becomes readable when it exits (-1 where pidfd_open is not available).
    pidfd: int = -1
    #: When the runtime directory was last listed for the marker (a rank that records none).
    listed_at: float = float("-inf")
    #: Its own marker was read once: gone later, the rank is ending (RankSample.ending).
    marker_read: bool = False

    def find_marker(self) -> Optional[str]:
        """Its marker's path: the name it would have is looked at every call (one ``lstat``); the
        directory, shared by every process of the user, is listed at most every LIST_EVERY seconds."""
        if self.marker is None:
            for rank in dict.fromkeys((self.rank, None)):
                path = os.path.join(self.directory, runtime.file_name(self.host, self.pid, "progress", rank))
                if os.path.lexists(path):
                    self.marker = path
                    return path
            now = time.monotonic()
            if now - self.listed_at >= LIST_EVERY:
                self.listed_at = now
                self.marker = self._listed_marker()
        return self.marker

    def _listed_marker(self) -> Optional[str]:
        """Its marker found by listing the directory (a name of another rank than the one it reads;
        of two, the one written last: rankscope.inproc.runtime.files_of)."""
        return runtime.files_of(self.directory, self.pid, self.host).get("progress")

    def sample(self) -> RankSample:
        """Its marker now (calls and step), when it records one."""
        if self.marker_read and self.marker is None:
            return RankSample(self.pid, self.rank, ending=True)
        path = self.find_marker()
        if path is None:
            return RankSample(self.pid, self.rank)
        try:
            record = progress_file.read(path, uid=self.uid)
        except (OSError, ValueError):
            self.marker = None  # gone, or not a marker: looked for again
            # its own marker, removed: only the rank's normal exit does that (it is ending)
            return RankSample(self.pid, self.rank, ending=self.marker_read)
        if record.pid != self.pid or (self.start_ticks and record.start_ticks != self.start_ticks):
            # An earlier process's file with the same pid (a reused pid; another rank's name, found by
            # listing before this rank wrote its own): forgotten, so that its own is found once written.
            self.marker = None
            return RankSample(self.pid, self.rank)
        self.marker_read = True
        return RankSample(self.pid, self.rank, record.calls, record.step)

    def close(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = -1


def find_workers(roots: list[int], host: Optional[str] = None) -> list[Watched]:
    """The workers of the job whose top processes are ``roots`` (a launcher, a script that starts
    one, or workers themselves), in rank order; [] when none runs yet."""
    host = host or short_hostname()
    table = ProcessTable()
    pids: list[int] = []
    #: torch.multiprocessing.spawn's children carry no rank variable: their rank is their start order.
    spawned: dict[int, Optional[int]] = {}
    for root in roots:
        info = table.procs.get(root)
        if info is None:
            continue
        if launcher_kind(info) is not None or table.is_candidate_worker(root):
            pids += [w.pid for w in workers_of(root, table, host).workers]
            continue
        below = sorted(table.descendants(root))  # a script that started the launcher, or the workers
        jobs = [table.spawn_job(top, host) for top in [root, *below] if top in table.children]
        mine = {w.pid: w.rank.rank for job in jobs if job is not None for w in job.workers}
        if mine:
            spawned.update(mine)
            pids += list(mine)
            continue
        launchers = [
            pid for pid in below if pid in table.procs and launcher_kind(table.procs[pid]) is not None
        ]
        for pid in launchers:
            pids += [w.pid for w in workers_of(pid, table, host).workers]
        if not launchers:
            pids += [
                pid for pid in below if table.is_candidate_worker(pid) and not table._parent_is_worker(pid)
            ]
    found: list[Watched] = []
    for pid in dict.fromkeys(pids):
        worker = table.worker(pid, host)
        environ = table.procs[pid].environ or {}
        uid = worker.uid
        directory = runtime.runtime_dir(environ, uid if uid is not None else os.getuid())
        rank = spawned.get(pid, worker.rank.rank)
        found.append(Watched(pid, rank, host, uid, directory, progress_file.start_ticks(pid)))
    return sorted(found, key=lambda w: (w.rank is None, w.rank or 0, w.pid))


def open_pidfd(pid: int) -> int:
    """A descriptor that becomes readable when ``pid`` exits; -1 when it cannot be had (gone, old kernel)."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has exited)."""
    entry = procfs.process(pid)
    return entry is not None and entry.state not in ("Z", "X")


def exit_status(pid: int) -> Optional[int]:
    """The exit status of a process that exited and waits for its parent (a zombie): >= 0 its exit
    code, < 0 the signal that ended it; None once it is reaped or unreadable (/proc/PID/stat's
    exit_code field, Linux 3.5+)."""
    try:
        raw = procfs._read_stat(pid)
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if not fields or fields[0] not in (b"Z", b"X") or len(fields) < 50:
        return None
    try:
        status = int(fields[49])
    except ValueError:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def exit_of(worker: Watched) -> Exit:
    """What is known of a worker that exited: its code while it is a zombie, whether its marker
    stayed (a normal interpreter exit removes it), and whether its in-process handler dumped its
    stacks on a SIGTERM."""
    code = exit_status(worker.pid)
    marker = worker.find_marker()  # a rank that died before a look found its marker still has it
    left = marker is not None and os.path.lexists(marker)
    term = any(path.endswith(".term") for path in handler_dumps(worker))
    return Exit(worker.pid, worker.rank, code, left, term)


def output_files(pids: list[int]) -> list[str]:
    """The regular files the processes' stdout and stderr write into (never a pipe or a terminal)."""
    paths: list[str] = []
    for pid in pids:
        for fd in (1, 2):
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if not stat.S_ISREG(os.stat(link).st_mode):
                    continue
                target = os.readlink(link)
            except OSError:
                continue
            if target.startswith("/") and not target.endswith(" (deleted)") and target not in paths:
                paths.append(target)
    return paths


def output_states(paths: list[str]) -> tuple[tuple[str, int, float], ...]:
    states = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        states.append((path, st.st_size, st.st_mtime))
    return tuple(states)


def handler_dumps(worker: Watched) -> list[str]:
    """The in-process handler's dumps (``<base>.term``, ``<base>.crash``) the worker left, not empty."""
    files = runtime.files_of(worker.directory, worker.pid, worker.host)
    found = []
    for kind in DUMP_KINDS:
        path = files.get(kind)
        if path is None:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size > 0 and (worker.uid is None or st.st_uid == worker.uid):
            found.append(path)
    return found

"""Find the distributed job(s) on this node: launchers, their workers, and each worker's rank.

A *launcher* is torchrun / torch.distributed.run / torch.distributed.launch, deepspeed,
accelerate, mpirun / mpiexec / orterun / prterun, or slurmstepd (the parent of tasks
started by srun). A *worker* is a Python process that carries a rank variable in its
environment, is not itself a launcher, and whose parent is not a worker of the same rank
(which excludes data-loader subprocesses). rankscope itself and its ancestors are never
targets: under srun, the shell that runs rankscope has SLURM_PROCID too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from rankscope.model import RankId
from rankscope.ranks import RANK_VARIABLES, rank_from_env, read_environ, short_hostname

_LAUNCHER_EXES = {"mpirun", "mpiexec", "orterun", "prterun", "prted", "orted", "slurmstepd", "mpiexec.hydra"}
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "accelerate.commands.launch": "accelerate",
}
_LAUNCHER_SCRIPTS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "accelerate": "accelerate"}


@dataclass
class ProcInfo:
    """A process from /proc; its command line and executable are read on first use."""

    pid: int
    ppid: int
    name: str
    _cmdline: Optional[list[str]] = field(default=None, repr=False)
    _exe: Optional[str] = field(default=None, repr=False)

    @property
    def cmdline(self) -> list[str]:
        if self._cmdline is None:
            try:
                with open(f"/proc/{self.pid}/cmdline", "rb") as handle:
                    raw = handle.read()
                self._cmdline = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
            except OSError:
                self._cmdline = []
        return self._cmdline

    @property
    def exe(self) -> str:
        if self._exe is None:
            try:
                self._exe = os.readlink(f"/proc/{self.pid}/exe")
            except OSError:
                self._exe = ""
        return self._exe

    @property
    def command(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.name}]"


def _read_stat(pid: int) -> Optional[tuple[str, int]]:
    """(comm, ppid) from /proc/PID/stat; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    open_paren, close_paren = stat.find(b"("), stat.rfind(b")")
    fields = stat[close_paren + 2 :].split()
    try:
        return stat[open_paren + 1 : close_paren].decode("utf-8", "replace"), int(fields[1])
    except (IndexError, ValueError):
        return None


@dataclass
class Worker:
    pid: int
    rank: RankId
    cmdline: str


@dataclass
class Job:
    """One launcher and the workers it started on this node (launcher may be unknown)."""

    launcher: str
    launcher_pid: Optional[int]
    launcher_cmdline: str
    workers: list[Worker] = field(default_factory=list)

    def describe(self) -> str:
        who = f"{self.launcher} pid {self.launcher_pid}" if self.launcher_pid else self.launcher
        return f"{who} ({len(self.workers)} workers)"


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def launcher_kind(proc: ProcInfo) -> Optional[str]:
    """Which launcher a process is, from its command line; ``None`` for anything else."""
    argv = proc.cmdline
    if _basename(proc.name) in _LAUNCHER_EXES or (argv and _basename(argv[0]) in _LAUNCHER_EXES):
        return "slurm" if proc.name == "slurmstepd" else "mpirun"
    if not argv:
        return None
    # `python -m module ...`
    for index, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[index + 1] in _LAUNCHER_MODULES:
            return _LAUNCHER_MODULES[argv[index + 1]]
    # `/venv/bin/torchrun ...` or `python /venv/bin/torchrun ...`
    for arg in argv[:2]:
        kind = _LAUNCHER_SCRIPTS.get(_basename(arg))
        if kind == "accelerate" and "launch" not in argv[1:3]:
            return None
        if kind:
            return kind
    return None


def is_python(proc: ProcInfo) -> bool:
    names = [proc.name, _basename(proc.exe)]
    if proc.cmdline:
        names.append(_basename(proc.cmdline[0]))
    return any(n.startswith("python") or n.startswith("pypy") for n in names if n)


def _is_rankscope(proc: ProcInfo) -> bool:
    argv = proc.cmdline
    if argv and _basename(argv[0]) == "rankscope":
        return True
    return any(argv[i] == "-m" and argv[i + 1] == "rankscope" for i in range(len(argv) - 1)) or any(
        _basename(a) == "rankscope" for a in argv[1:2]
    )


class ProcessTable:
    """One pass over /proc/*/stat: every process with its parent and children.

    Reading /proc directly (command lines only when needed) keeps discovery at a few
    milliseconds: `rankscope stacks` is compared with a bare `pgrep | xargs py-spy`.
    """

    def __init__(self) -> None:
        self.procs: dict[int, ProcInfo] = {}
        self.children: dict[int, list[int]] = {}
        with os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                stat = _read_stat(pid)
                if stat is not None:
                    self.procs[pid] = ProcInfo(pid=pid, ppid=stat[1], name=stat[0])
        for pid, info in self.procs.items():
            self.children.setdefault(info.ppid, []).append(pid)
        self._environ: dict[int, Optional[dict[str, str]]] = {}
        self.excluded = self._self_and_ancestors()

    def _self_and_ancestors(self) -> set[int]:
        pids = set()
        pid = os.getpid()
        while pid and pid not in pids:
            pids.add(pid)
            info = self.procs.get(pid)
            pid = info.ppid if info else 0
        return pids

    def environ(self, pid: int) -> Optional[dict[str, str]]:
        if pid not in self._environ:
            try:
                self._environ[pid] = read_environ(pid)
            except OSError:
                self._environ[pid] = None
        return self._environ[pid]

    def has_rank(self, pid: int) -> bool:
        env = self.environ(pid)
        return bool(env) and any(v in env for v in RANK_VARIABLES)  # type: ignore[operator]

    def descendants(self, pid: int) -> list[int]:
        out: list[int] = []
        stack = list(self.children.get(pid, []))
        while stack:
            child = stack.pop()
            out.append(child)
            stack.extend(self.children.get(child, []))
        return out

    def is_candidate_worker(self, pid: int) -> bool:
        info = self.procs.get(pid)
        if info is None or pid in self.excluded or _is_rankscope(info):
            return False
        return launcher_kind(info) is None and is_python(info) and self.has_rank(pid)

    def nearest_launcher(self, pid: int) -> Optional[int]:
        seen = set()
        info = self.procs.get(pid)
        while info is not None and info.ppid and info.ppid not in seen:
            seen.add(info.ppid)
            parent = self.procs.get(info.ppid)
            if parent is None:
                return None
            if launcher_kind(parent):
                return parent.pid
            info = parent
        return None

    def _parent_is_worker(self, pid: int) -> bool:
        """True for a data-loader or other subprocess of a worker (same job, same rank env)."""
        info = self.procs.get(pid)
        parent = self.procs.get(info.ppid) if info else None
        while parent is not None and launcher_kind(parent) is None:
            if self.is_candidate_worker(parent.pid):
                return True
            if _is_rankscope(parent):  # `rankscope prefix -- python train.py`: the child is the worker
                parent = self.procs.get(parent.ppid)
                continue
            return False
        return False

    def worker(self, pid: int, host: Optional[str] = None) -> Worker:
        env = self.environ(pid) or {}
        info = self.procs[pid]
        return Worker(pid=pid, rank=rank_from_env(env, host=host), cmdline=info.command)


def _launcher_name(table: ProcessTable, pid: Optional[int]) -> str:
    if pid is None:
        return "unknown"
    info = table.procs.get(pid)
    return (launcher_kind(info) or "unknown") if info else "unknown"


def _sort_workers(job: Job) -> Job:
    """By rank; processes without a rank last, by pid."""
    job.workers.sort(key=lambda w: (w.rank.rank is None, w.rank.rank or 0, w.pid))
    return job


def find_jobs(table: Optional[ProcessTable] = None, host: Optional[str] = None) -> list[Job]:
    """Every distributed job on this node: workers grouped by their nearest launcher."""
    table = table or ProcessTable()
    host = host or short_hostname()
    jobs: dict[Optional[int], Job] = {}
    for pid in sorted(table.procs):
        if not table.is_candidate_worker(pid) or table._parent_is_worker(pid):
            continue
        launcher_pid = table.nearest_launcher(pid)
        job = jobs.get(launcher_pid)
        if job is None:
            info = table.procs.get(launcher_pid) if launcher_pid else None
            job = Job(
                launcher=_launcher_name(table, launcher_pid),
                launcher_pid=launcher_pid,
                launcher_cmdline=info.command if info else "",
            )
            jobs[launcher_pid] = job
        job.workers.append(table.worker(pid, host))
    # Workers are keyed by their *nearest* launcher, so srun's slurmstepd around torchrun is not a job.
    for job in jobs.values():
        _sort_workers(job)
    return sorted(jobs.values(), key=lambda j: -len(j.workers))


def workers_of(pid: int, table: ProcessTable, host: Optional[str] = None) -> Job:
    """The job a ``--pid`` names: a launcher's workers, or a single worker/process."""
    host = host or short_hostname()
    info = table.procs[pid]
    kind = launcher_kind(info)
    if kind is not None:
        workers = [
            table.worker(child, host)
            for child in sorted(table.descendants(pid))
            if table.is_candidate_worker(child) and not table._parent_is_worker(child)
        ]
        return _sort_workers(
            Job(launcher=kind, launcher_pid=pid, launcher_cmdline=info.command, workers=workers)
        )
    launcher_pid = table.nearest_launcher(pid)
    launcher_info = table.procs.get(launcher_pid) if launcher_pid else None
    return Job(
        launcher=_launcher_name(table, launcher_pid),
        launcher_pid=launcher_pid,
        launcher_cmdline=launcher_info.command if launcher_info else "",
        workers=[table.worker(pid, host)],
    )


def all_python(table: ProcessTable, host: Optional[str] = None) -> Job:
    """Every Python process of the calling user (root: of every user), rankscope excluded."""
    host = host or short_hostname()
    uid = os.geteuid()
    workers = []
    for pid, info in sorted(table.procs.items()):
        if pid in table.excluded or _is_rankscope(info) or not is_python(info):
            continue
        if uid != 0:
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
            except OSError:
                continue
        workers.append(table.worker(pid, host))
    return Job(launcher="any", launcher_pid=None, launcher_cmdline="", workers=workers)

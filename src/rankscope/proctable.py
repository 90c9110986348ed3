"""The process table of this node and the rules that need nothing but /proc: which process is a
launcher, which is a rankscope command, which carries a rank, and which of them a launcher started.

Split from rankscope.procs (the job model: workers, jobs, ranks as dataclasses) because a plain
`rankscope stacks` starts its first dumps before anything else is imported
(rankscope.stacks.headstart): this module imports only ``os``, rankscope.procfs and the rank
variables' names, and no ``typing`` or ``dataclasses`` (about 30 ms of a 16-rank run's start-up on
the 2-core machine, docs/benchmarks.md). rankscope.procs builds the jobs on it.
"""

from __future__ import annotations

from rankscope import procfs
from rankscope.ranks import RANK_VARIABLES

#: typing costs milliseconds to import; the annotations do not need it at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from rankscope.procfs import ProcfsEntry

_LAUNCHER_EXES = {"mpirun", "mpiexec", "orterun", "prterun", "prted", "orted", "slurmstepd", "mpiexec.hydra"}
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "accelerate.commands.launch": "accelerate",
}
_LAUNCHER_SCRIPTS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "accelerate": "accelerate"}


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


#: What multiprocessing's spawn start method runs in each child (torch.multiprocessing.spawn uses it).
_SPAWN_MAIN = "from multiprocessing.spawn import spawn_main"


def is_spawn_child(proc: ProcfsEntry) -> bool:
    """A process multiprocessing's spawn start method started (its command line says so)."""
    argv = proc.cmdline
    return "--multiprocessing-fork" in argv and any(arg.startswith(_SPAWN_MAIN) for arg in argv)


def launcher_kind(proc: ProcfsEntry) -> Optional[str]:
    """Which launcher a process is, from its command line; ``None`` for anything else."""
    argv = proc.cmdline
    if _basename(proc.comm) in _LAUNCHER_EXES or (argv and _basename(argv[0]) in _LAUNCHER_EXES):
        return "slurm" if proc.comm == "slurmstepd" else "mpirun"
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


def is_rankscope(proc: ProcfsEntry) -> bool:
    """Whether a process is a rankscope command (never a target).

    `rankscope trace run -- train.py` is not one: it runs the program in its own process (the
    worker `torchrun --no-python rankscope trace run` starts), so it is a target like `python train.py`.
    """
    argv = proc.cmdline
    at: Optional[int] = None
    if argv and _basename(argv[0]) == "rankscope":
        at = 0
    elif len(argv) > 1 and _basename(argv[1]) == "rankscope":
        at = 1
    else:
        at = next(
            (i + 1 for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == "rankscope"), None
        )
    return at is not None and argv[at + 1 : at + 3] != ["trace", "run"]


class ProcessTable:
    """Every process on this node (rankscope.procfs.table: one pass over /proc) with its children.

    Command lines and environments are read only for the processes discovery asks about,
    which keeps it at a few milliseconds: `rankscope stacks` is compared with a bare
    `pgrep | xargs py-spy`.
    """

    def __init__(self) -> None:
        self.procs: dict[int, ProcfsEntry] = procfs.table()
        self.children: dict[int, list[int]] = {}
        for pid, info in self.procs.items():
            self.children.setdefault(info.ppid, []).append(pid)
        self.excluded = procfs.self_and_ancestors(self.procs)

    def has_rank(self, pid: int) -> bool:
        info = self.procs.get(pid)
        return info is not None and any(info.variable(name) is not None for name in RANK_VARIABLES)

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
        if info is None or pid in self.excluded or is_rankscope(info):
            return False
        if launcher_kind(info) is not None or not self.has_rank(pid):
            return False
        # Asked last: for the few rank carriers whose names say nothing it reads /proc/PID/maps.
        return info.is_python is True

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
            if is_rankscope(parent):  # `rankscope prefix -- python train.py`: the child is the worker
                parent = self.procs.get(parent.ppid)
                continue
            return False
        return False

    def launched(self, pid: int) -> list[int]:
        """The workers launcher ``pid`` started: its descendants that carry a rank, loader workers
        left out, by pid."""
        return [
            child
            for child in sorted(self.descendants(pid))
            if self.is_candidate_worker(child) and not self._parent_is_worker(child)
        ]

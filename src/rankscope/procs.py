"""Find the distributed job(s) on this node: launchers, their workers, and each worker's rank.

A *launcher* is torchrun / torch.distributed.run / torch.distributed.launch, deepspeed,
accelerate, mpirun / mpiexec / orterun / prterun, or slurmstepd (the parent of tasks
started by srun). A *worker* is a Python process that carries a rank variable in its
environment, is not itself a launcher, and whose parent is not a worker of the same rank
(which excludes data-loader subprocesses). rankscope itself and its ancestors are never
targets: under srun, the shell that runs rankscope has SLURM_PROCID too.

A job started with ``torch.multiprocessing.spawn`` (``mp.spawn(fn, nprocs=N)``, the DDP tutorials'
way) has no launcher and usually no rank in any environment (the ranks set ``MASTER_ADDR`` and call
``init_process_group(rank=...)`` in their own code): its ranks are the parent's children that
multiprocessing's spawn start method runs (``python -c "from multiprocessing.spawn import
spawn_main; ..." --multiprocessing-fork``) and that loaded torch, two or more. ``mp.spawn`` starts
rank i as its i-th process, so they are numbered by their start (then pid), launcher ``mp.spawn``.
A parent that is itself a rank is left alone (its spawn children are data-loader workers).

PyTorch Lightning's DDP (``Trainer(strategy="ddp")`` run as ``python train.py``) has no launcher
either: the script is local rank 0 and runs itself again once per other local rank, with
``LOCAL_RANK=i``, ``NODE_RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR``/``MASTER_PORT`` in the child's
environment, none in its own (it sets them at run time), and no ``RANK`` anywhere. Such children of
one Python parent that is no rank are a job (launcher ``lightning``) with the parent as local rank 0;
global rank ``NODE_RANK * processes + LOCAL_RANK`` (its formula).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from rankscope import procfs
from rankscope.jobkey import JobKey, common_key, key_from_env
from rankscope.model import RankId
from rankscope.procfs import ProcfsEntry
from rankscope.ranks import RANK_VARIABLES, rank_from_env, short_hostname

_LAUNCHER_EXES = {"mpirun", "mpiexec", "orterun", "prterun", "prted", "orted", "slurmstepd", "mpiexec.hydra"}
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "accelerate.commands.launch": "accelerate",
}
#: The launcher of a job found by evidence alone (its ranks share a rendezvous but have no launcher here).
NO_LAUNCHER = "no launcher"
_LAUNCHER_SCRIPTS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "accelerate": "accelerate"}


@dataclass
class Worker:
    pid: int
    rank: RankId
    cmdline: str
    #: What its environment says about its job (rankscope.jobkey).
    key: JobKey = field(default_factory=JobKey)
    uid: Optional[int] = None
    #: Its pid inside its container's pid namespace, when it runs in one (``NSpid``); ``pid`` is the host's.
    ns_pid: Optional[int] = None


@dataclass
class Job:
    """One launcher and the workers it started on this node (launcher may be unknown)."""

    launcher: str
    launcher_pid: Optional[int]
    launcher_cmdline: str
    workers: list[Worker] = field(default_factory=list)

    @property
    def key(self) -> JobKey:
        """What its workers' environments agree on."""
        return common_key([w.key for w in self.workers])

    def describe(self) -> str:
        who = f"{self.launcher} pid {self.launcher_pid}" if self.launcher_pid else self.launcher
        return f"{who} ({len(self.workers)} workers)"


@dataclass
class Discovery:
    """What discovery found on this node: the jobs, and the rank-carrying processes of no job."""

    jobs: list[Job]
    #: Python processes with a rank in their environment that fit no job (no launcher, a world of one
    #: and nothing that ties them to another process): listed apart, never merged into a job.
    strays: list[Worker]


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


#: What multiprocessing's spawn start method runs in each child (torch.multiprocessing.spawn uses it).
_SPAWN_MAIN = "from multiprocessing.spawn import spawn_main"
#: The launcher name of a job of torch.multiprocessing.spawn's children.
MP_SPAWN = "mp.spawn"
#: In /proc/PID/maps: torch's own library, loaded by ``import torch``.
TORCH_LIBRARIES = (b"libtorch",)


def torch_loaded(pids: Iterable[int]) -> dict[int, Optional[bool]]:
    """Whether each process loaded torch's library (None: its maps are unreadable)."""
    return {pid: procfs.maps_any(pid, TORCH_LIBRARIES) for pid in pids}


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

    def __init__(
        self, procs: Optional[dict[int, ProcfsEntry]] = None, excluded: Optional[set[int]] = None
    ) -> None:
        """This node's table; or ``procs`` read elsewhere (a node's snapshot: rankscope.stacks.shell_answer),
        ``excluded`` then being the reader's own chain."""
        self.procs: dict[int, ProcfsEntry] = procfs.table() if procs is None else procs
        self.children: dict[int, list[int]] = {}
        for pid, info in self.procs.items():
            self.children.setdefault(info.ppid, []).append(pid)
        self.excluded = procfs.self_and_ancestors(self.procs) if excluded is None else excluded

    # What discovery reads beyond the entries, asked of the table so that a snapshot can answer.

    def maps_any(self, pid: int, marks: tuple[bytes, ...]) -> Optional[bool]:
        return procfs.maps_any(pid, marks)

    def start_ticks(self, pid: int) -> int:
        return procfs.start_ticks(pid)

    def ns_pids(self, pid: int) -> list[int]:
        return procfs.ns_pids(pid)

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

    def spawned_ranks(self, pid: int) -> list[int]:
        """The ranks of a ``torch.multiprocessing.spawn`` job ``pid`` started, in rank order (their
        start, then pid); [] when it started none (see the module's docstring)."""
        info = self.procs.get(pid)
        if info is None or pid in self.excluded or self.is_candidate_worker(pid) or is_rankscope(info):
            return []
        kids = [
            c
            for c in self.children.get(pid, [])
            if self.procs[c].state not in ("Z", "X")
            and is_spawn_child(self.procs[c])
            and not self.has_rank(c)
        ]
        if len(kids) < 2 or not all(self.maps_any(c, TORCH_LIBRARIES) for c in kids):
            return []
        return sorted(kids, key=lambda c: (self.start_ticks(c), c))

    def spawn_job(self, pid: int, host: Optional[str] = None) -> Optional[Job]:
        """The job of a ``torch.multiprocessing.spawn`` parent, ranks by start order; None when ``pid`` is none."""
        kids = self.spawned_ranks(pid)
        if not kids:
            return None
        host = host or short_hostname()
        workers = []
        for rank, kid in enumerate(kids):
            worker = self.worker(kid, host)
            worker.rank = RankId(
                host,
                rank,
                local_rank=rank,
                world_size=len(kids),
                local_world_size=len(kids),
                launcher=MP_SPAWN,
            )
            workers.append(worker)
        info = self.procs[pid]
        return Job(launcher=MP_SPAWN, launcher_pid=pid, launcher_cmdline=info.command, workers=workers)

    def worker(self, pid: int, host: Optional[str] = None) -> Worker:
        info = self.procs[pid]
        env = info.environ or {}
        rank = rank_from_env(env, host=host)
        nspids = self.ns_pids(pid)
        return Worker(
            pid=pid,
            rank=rank,
            cmdline=info.command,
            key=key_from_env(env, rank.world_size),
            uid=info.uid,
            ns_pid=nspids[-1] if len(nspids) > 1 else None,
        )


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
    """Every distributed job on this node (the processes of no job left out: see :func:`discover`)."""
    return discover(table, host).jobs


def discover(table: Optional[ProcessTable] = None, host: Optional[str] = None) -> Discovery:
    """Every distributed job on this node, grouped by evidence, and the processes that fit none.

    Workers under a launcher are grouped by their nearest launcher, their job key (run id, master,
    SLURM step, world size) and their owner. Workers under no launcher are grouped by key and owner;
    such a group joins the launcher job whose key and owner it matches exactly (a worker whose launcher
    died), else it is a job of its own when it has several processes or names a rendezvous with a world
    of more than one. What is left (one process, no launcher, a world of one or no rendezvous) is a stray.
    """
    table = table or ProcessTable()
    host = host or short_hostname()
    launched: dict[tuple[int, JobKey, Optional[int]], Job] = {}
    loose: dict[tuple[JobKey, Optional[int]], list[Worker]] = {}
    for pid in sorted(table.procs):
        if not table.is_candidate_worker(pid) or table._parent_is_worker(pid):
            continue
        worker = table.worker(pid, host)
        launcher_pid = table.nearest_launcher(pid)
        if launcher_pid is None:
            loose.setdefault((worker.key, worker.uid), []).append(worker)
            continue
        job = launched.get((launcher_pid, worker.key, worker.uid))
        if job is None:
            info = table.procs.get(launcher_pid)
            job = Job(
                launcher=_launcher_name(table, launcher_pid),
                launcher_pid=launcher_pid,
                launcher_cmdline=info.command if info else "",
            )
            launched[(launcher_pid, worker.key, worker.uid)] = job
        job.workers.append(worker)
    # Workers are keyed by their *nearest* launcher, so srun's slurmstepd around torchrun is not a job.
    jobs = list(launched.values())
    for pid in sorted({table.procs[c].ppid for c in table.procs if _maybe_spawned(table.procs[c])}):
        spawned = table.spawn_job(pid, host)
        if spawned is not None:
            jobs.append(spawned)
    taken = {w.pid for job in jobs for w in job.workers} | {w.pid for ws in loose.values() for w in ws}
    jobs.extend(_relaunched_jobs(table, host, taken))
    strays: list[Worker] = []
    for (key, uid), workers in loose.items():
        home = [
            job
            for (_, job_key, job_uid), job in launched.items()
            if key.rendezvous and job_key == key and job_uid == uid
        ]
        if not _can_be_one_job(workers):
            workers, odd = _apart_from_duplicates(workers)
            strays.extend(odd)
        if len(home) == 1:
            home[0].workers.extend(workers)
        elif (len(workers) > 1 and _can_be_one_job(workers)) or (
            key.rendezvous and (key.world_size or 0) > 1
        ):
            jobs.append(Job(launcher=NO_LAUNCHER, launcher_pid=None, launcher_cmdline="", workers=workers))
        else:
            strays.extend(workers)
    for job in jobs:
        _sort_workers(job)
    return Discovery(
        jobs=sorted(jobs, key=lambda j: (-len(j.workers), j.workers[0].pid)),
        strays=sorted(strays, key=lambda w: w.pid),
    )


def _can_be_one_job(workers: Sequence[Worker]) -> bool:
    """Whether launcher-less workers with one key can be the ranks of one job: each its own rank, no
    more of them than the world size they state (two scripts that each say ``RANK=0 WORLD_SIZE=1``
    are two strays, not a job)."""
    ranks = [w.rank.rank for w in workers]
    sizes = {w.rank.world_size for w in workers if w.rank.world_size}
    return len(set(ranks)) == len(ranks) and not any(len(workers) > size for size in sizes)


def _program(cmdline: str) -> str:
    """The script or module a command line runs (``train.py``, ``-m pkg.train``), else its first word."""
    words = cmdline.split()
    for at, word in enumerate(words):
        if word == "-m" and at + 1 < len(words):
            return "-m " + words[at + 1]
        if word.endswith(".py"):
            return word.rsplit("/", 1)[-1]
    return words[0] if words else ""


def _apart_from_duplicates(workers: list[Worker]) -> tuple[list[Worker], list[Worker]]:
    """Workers with one rendezvous key of which two claim one rank: the job's ranks run one program,
    so a process of another program with a rank the job's processes already have (a script started
    by hand in the same shell, with the job's variables) is a stray. Where that does not settle it,
    they stay together (two runs of one script: nothing tells which is the job's)."""
    programs = Counter(_program(w.cmdline) for w in workers)
    main, _count = programs.most_common(1)[0]
    job = [w for w in workers if _program(w.cmdline) == main]
    taken = {w.rank.rank for w in job}
    odd = [w for w in workers if _program(w.cmdline) != main]
    if not odd or not _can_be_one_job(job) or not all(w.rank.rank in taken for w in odd):
        return workers, []
    return job, odd


#: The launcher name of a job whose script runs itself per local rank (PyTorch Lightning's DDP).
RELAUNCH = "lightning"


def _relaunched_jobs(
    table: ProcessTable, host: str, taken: set[int], among: Optional[Iterable[int]] = None
) -> list[Job]:
    """Jobs of scripts that ran themselves again per local rank (see the module's docstring);
    ``among``: only the jobs whose local ranks 1.. are among these processes (default: any)."""
    by_parent: dict[int, list[tuple[int, int]]] = {}
    pids = table.procs.keys() if among is None else [p for p in among if p in table.procs]
    for pid in pids:
        info = table.procs[pid]
        if pid in taken or pid in table.excluded or info.state in ("Z", "X") or table.has_rank(pid):
            continue
        value = info.variable("LOCAL_RANK")
        if (
            value is None
            or not value.strip().isdigit()
            or int(value) < 1
            or info.variable("MASTER_PORT") is None
        ):
            continue
        by_parent.setdefault(info.ppid, []).append((int(value), pid))
    jobs = []
    for parent, children in sorted(by_parent.items()):
        head = table.procs.get(parent)
        if (
            head is None
            or parent in taken
            or parent in table.excluded
            or table.has_rank(parent)
            or launcher_kind(head) is not None
            or is_rankscope(head)
            or head.is_python is not True
        ):
            continue
        children.sort()
        if [local for local, _ in children] != list(range(1, len(children) + 1)):
            continue  # not one local rank each, from 1: not this pattern
        first = table.procs[children[0][1]]
        processes = len(children) + 1
        node_rank = (
            int(first.variable("NODE_RANK") or 0) if (first.variable("NODE_RANK") or "0").isdigit() else 0
        )
        size = first.variable("WORLD_SIZE")
        world = int(size) if size is not None and size.isdigit() else processes
        workers = []
        for local, pid in [(0, parent), *children]:
            worker = table.worker(pid, host)
            worker.rank = RankId(
                host,
                node_rank * processes + local,
                local_rank=local,
                world_size=world,
                node_rank=node_rank,
                local_world_size=processes,
                launcher=RELAUNCH,
            )
            worker.key = table.worker(children[0][1], host).key  # the parent's own environment has none
            workers.append(worker)
        jobs.append(
            Job(launcher=RELAUNCH, launcher_pid=parent, launcher_cmdline=head.command, workers=workers)
        )
    return jobs


def _maybe_spawned(proc: ProcfsEntry) -> bool:
    """A Python process whose parent may be a ``torch.multiprocessing.spawn`` job (its names first: cheap)."""
    return proc.comm.startswith(("python", "pt_main_thread")) and is_spawn_child(proc)


def workers_of(pid: int, table: ProcessTable, host: Optional[str] = None) -> Job:
    """The job a ``--pid`` names: a launcher's workers (``mp.spawn``'s parent too, and one of its
    children: the parent's job), or a single worker/process."""
    host = host or short_hostname()
    info = table.procs[pid]
    spawned = table.spawn_job(pid, host)
    if spawned is None and not table.has_rank(pid) and pid in table.spawned_ranks(info.ppid):
        spawned = table.spawn_job(info.ppid, host)  # a spawned rank: its job, ranks known by start order
    if spawned is not None:
        return spawned
    # Only pid's own children (pid is the local rank 0) or its siblings (pid is another local rank) can
    # be the local ranks of a relaunched job that holds it: not every environment on the node is read.
    family = [*table.children.get(pid, []), *table.children.get(info.ppid, [])]
    relaunched = [
        job for job in _relaunched_jobs(table, host, set(), family) if pid in {w.pid for w in job.workers}
    ]
    if relaunched:
        return relaunched[0]
    kind = launcher_kind(info)
    if kind is not None:
        workers = _launched(pid, table, host)
        return _sort_workers(
            Job(launcher=kind, launcher_pid=pid, launcher_cmdline=info.command, workers=workers)
        )
    launcher_pid = table.nearest_launcher(pid)
    if launcher_pid is None and table.has_rank(pid) and info.ppid in (0, 1):
        # a rank whose launcher is gone (killed: its workers live on, children of init): the other
        # ranks of its rendezvous, as `stacks` groups them without a target (seen on a real job: `why
        # --pid` of one rank called the others "gone"). A rank of a job started without a launcher
        # (its parent alive) is the one process named, as before.
        mine = [job for job in discover(table, host).jobs if pid in {w.pid for w in job.workers}]
        if mine and len(mine[0].workers) > 1:
            return mine[0]
    launcher_info = table.procs.get(launcher_pid) if launcher_pid else None
    return Job(
        launcher=_launcher_name(table, launcher_pid),
        launcher_pid=launcher_pid,
        launcher_cmdline=launcher_info.command if launcher_info else "",
        workers=[table.worker(pid, host)],
    )


def _launched(pid: int, table: ProcessTable, host: str) -> list[Worker]:
    """The workers a launcher started (its descendants that carry a rank, loader workers left out)."""
    return [
        table.worker(child, host)
        for child in sorted(table.descendants(pid))
        if table.is_candidate_worker(child) and not table._parent_is_worker(child)
    ]


def all_python(table: ProcessTable, host: Optional[str] = None) -> Job:
    """Every Python process of the calling user (root: of every user), rankscope excluded.

    "Python" is rankscope.procfs's rule, so an embedded interpreter counts too; for a process
    whose names say nothing that costs one read of /proc/PID/maps.
    """
    host = host or short_hostname()
    uid = os.geteuid()
    workers = []
    for pid, info in sorted(table.procs.items()):
        if pid in table.excluded or (uid != 0 and info.uid != uid):
            continue
        if info.is_python is True and not is_rankscope(info):
            workers.append(table.worker(pid, host))
    return Job(launcher="any", launcher_pid=None, launcher_cmdline="", workers=workers)


def unreadable_workers(table: ProcessTable) -> list[ProcfsEntry]:
    """Python processes under a launcher whose environment this user may not read: another user's job.

    Discovery finds ranks in environments; another user's are unreadable (PermissionError), so
    their job is invisible rather than absent. Only processes under a launcher (whose command
    line anyone may read) count, so another user's Python daemons do not turn "no job here"
    into an error. Launchers, rankscope and subprocesses of such a process (data loaders) are
    left out: one entry per would-be worker.
    """
    found = {
        pid: info
        for pid, info in table.procs.items()
        if pid not in table.excluded
        and info.environ_denied
        and launcher_kind(info) is None
        and not is_rankscope(info)
        and info.is_python is True
        and table.nearest_launcher(pid) is not None
    }
    return [info for pid, info in sorted(found.items()) if info.ppid not in found]


class ProcessTarget(NamedTuple):
    """One process a verb works on (``--pid``/``--job``): its pid and, where known, its rank."""

    pid: int
    #: None: the process is gone, or was named as it is (``expand_launchers`` False).
    rank: Optional[RankId] = None


def resolve_targets(
    pids: Sequence[int] = (),
    job: bool = False,
    *,
    expand_launchers: bool = True,
    table: Optional[ProcessTable] = None,
) -> list[ProcessTarget]:
    """The processes a verb's ``PID...``/``--job`` name: the one resolver of every verb that takes them.

    ``job``: every worker of every distributed job on this node, by job and rank (empty when there
    is none: the verb says so in its own words). Otherwise the ``pids`` in the order named: a
    launcher stands for its workers (as in ``stacks --pid``) unless ``expand_launchers`` is False
    (``core grab`` dumps the very processes named), a worker gets its rank, and a pid that is gone
    stays, without a rank (its error comes when the verb reaches it).
    """
    if not job and not expand_launchers:
        return [ProcessTarget(pid) for pid in pids]
    table = table if table is not None else ProcessTable()
    if job:
        return [ProcessTarget(w.pid, w.rank) for found in find_jobs(table) for w in found.workers]
    targets: list[ProcessTarget] = []
    for pid in pids:
        entry = table.procs.get(pid)
        if entry is None or entry.state in ("Z", "X"):
            targets.append(ProcessTarget(pid))
        elif launcher_kind(entry) is not None or table.spawned_ranks(pid):
            workers = workers_of(pid, table).workers
            targets.extend([ProcessTarget(w.pid, w.rank) for w in workers] or [ProcessTarget(pid)])
        else:
            targets.append(ProcessTarget(pid, workers_of(pid, table).workers[0].rank))
    return targets

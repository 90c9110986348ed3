"""The local pipeline of `rankscope stacks`: find targets, dump them (N samples), group, report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Optional, Protocol

from rankscope.lifetime import process_started as process_started  # where the commands find it
from rankscope.meanwhile import Meanwhile
from rankscope.model import Failure, FailureKind, ProcessSnapshot, Stage
from rankscope.procs import (
    NO_LAUNCHER,
    Job,
    ProcessTable,
    Worker,
    all_python,
    discover,
    launcher_kind,
    torch_loaded,
    unreadable_workers,
    workers_of,
)
from rankscope.ranks import short_hostname
from rankscope.stacks.collect import DumpOutcome, Stop, Target, collect
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.pyspy_cmd import find_pyspy
from rankscope.stacks.steps import RankFiles, read_steps, runtime_files

if TYPE_CHECKING:  # the rest is imported while the first dumps run (AFTER_DUMPS); rankscope.fr after them
    from rankscope.stacks.fr_live import LiveRecorders
    from rankscope.stacks.report import StacksReport

#: What the report needs once the dumps are in, imported in a thread while the first dumps run: on
#: two cores the 16 dumps of a 16-rank job and these imports (a third of rankscope's own CPU) share the
#: wall time instead of adding to it (docs/benchmarks.md, "Start-up: the dumps start first"). A node's
#: raw answer needs only the first two (AFTER_DUMPS_RAW): py-spy's reader, wanted as the first dump is in.
AFTER_DUMPS = (
    "rankscope.stacks.pyspy",
    "rankscope.stacks.report",
    "rankscope.stacks.merge",
    "rankscope.stacks.frames",
    "rankscope.stacks.analyse",
    "rankscope.stacks.render",
    "rankscope.stacks.gpu",
)
AFTER_DUMPS_RAW = AFTER_DUMPS[:2]

# Grouping, the diagnosis, the in-process handlers and the GPU reader are imported where they are
# used: a node's raw answer (rankscope.stacks.node) needs none of them (docs/benchmarks.md).

#: The NVIDIA driver's control device: NVML and nvidia-smi both need it, so without it a node's raw
#: answer does not look for a rank waiting on its GPU.
NVIDIA_CONTROL = "/dev/nvidiactl"


class NeedsFullRun(Exception):
    """A raw run (``run_local(raw=True)``) met what only the full pipeline does here: a rank's
    in-process handler holds its flight recorder. Raised before any dump."""


Progress = Callable[[str], None]


class NodeSource(Protocol):
    """Another node's processes and dumps, read there and sent here (rankscope.stacks.shell_answer):
    a raw run over them is the run that node's own rankscope would have made."""

    #: The node's short host name.
    host: str
    #: Its process table, as its /proc showed it.
    table: ProcessTable
    #: Whether the NVIDIA driver is there (then a rank waiting for its GPU needs the node's own run).
    nvidia: bool

    def dump(self, targets: list[Target]) -> list[DumpOutcome]:
        """The node's dumps of ``targets``, in their order."""
        ...


@dataclass
class LocalResult:
    report: StacksReport
    #: (sample index, outcome) for every dump attempt: what --out keeps.
    outcomes: list[tuple[int, DumpOutcome]] = field(default_factory=list)
    #: The native dumps of representatives after the last sample (--native without --native-all).
    native_outcomes: list[DumpOutcome] = field(default_factory=list)
    #: The ranks' flight recorders, from their in-process handlers (None: no handler answers ``fr``).
    recorders: Optional[LiveRecorders] = None


def resolve_jobs(
    options: StacksOptions, table: ProcessTable, host: str
) -> tuple[list[Job], list[Worker], list[Failure]]:
    """What to look at: the named pids, every Python process, or the job(s) found here; and the
    processes with a rank that fit no job (only when discovering: they are listed, not dumped)."""
    failures: list[Failure] = []
    if options.all_python:
        return [all_python(table, host)], [], failures
    if options.pids:
        jobs: list[Job] = []
        for pid in options.pids:
            if pid not in table.procs:
                failures.append(
                    Failure(
                        f"pid {pid}",
                        Stage.DISCOVER,
                        "no such process (it exited or never existed)",
                        "check the pid with ps; a rank that exited early is in the job's log",
                        kind=FailureKind.GONE,
                    )
                )
                continue
            job = workers_of(pid, table, host)
            same = [j for j in jobs if job.launcher_pid is not None and j.launcher_pid == job.launcher_pid]
            if not same:
                jobs.append(job)
                continue
            # A launcher named twice, or two workers of one job: one job, each worker once.
            known = {w.pid for w in same[0].workers}
            same[0].workers.extend(w for w in job.workers if w.pid not in known)
        return jobs, [], failures
    found = discover(table, host)
    if not found.jobs:
        failures.extend(unreadable_failures(table))
    # Several jobs: each is reported in its own section (StacksReport.several_jobs).
    return found.jobs, found.strays, failures


def unreadable_failures(table: ProcessTable) -> list[Failure]:
    """No job found: another user's Python processes whose environments cannot be read, as one failure."""
    owners: dict[int, list[int]] = {}
    launchers: list[tuple[str, int]] = []
    for info in unreadable_workers(table):
        if info.uid is None:
            continue
        owners.setdefault(info.uid, []).append(info.pid)
        launcher = table.nearest_launcher(info.pid)
        if launcher is not None:
            kind = launcher_kind(table.procs[launcher]) or "launcher"
            if (kind, launcher) not in launchers:
                launchers.append((kind, launcher))
    if not owners:
        return []
    from rankscope.stacks.permissions import unreadable_job

    reason, hint = unreadable_job(owners, launchers)
    return [Failure("this node", Stage.DISCOVER, reason, hint, kind=FailureKind.PERMISSION)]


def _pause(seconds: float, stop: Optional[Stop]) -> None:
    """Sleep between samples; a stop signal ends the pause at once."""
    if stop is None:
        time.sleep(seconds)
        return
    import select

    select.select([stop.fd], [], [], seconds)


def _native_failure(failure: Failure) -> Failure:
    """A representative's native dump failed: its Python stack is still in the report."""
    return replace(failure, reason=f"native frames: {failure.reason}")


def _signal_where_refused(
    outcomes: list[DumpOutcome], deadline: float, stop: Optional[Stop], host: str, via_signal: set[int]
) -> list[DumpOutcome]:
    """py-spy was refused by the ptrace rules: dump those processes through their in-process handler.

    A process without a handler keeps py-spy's failure, its hint extended with the way around ptrace.
    """
    refused = [
        o
        for o in outcomes
        if o.failure is not None
        and o.failure.kind == FailureKind.PERMISSION
        and o.failure.stage == Stage.ATTACH
    ]
    if not refused:
        return outcomes
    from rankscope.stacks.inproc_collect import collect_via_signal

    remaining = max(0.1, deadline - time.monotonic())
    again = collect_via_signal(
        [o.target for o in refused], timeout=min(remaining, 10.0), deadline=deadline, stop=stop, host=host
    )
    replaced = {}
    for before, after in zip(refused, again):
        if after.snapshot is not None:
            replaced[id(before)] = after
            via_signal.add(after.target.pid)
        elif (
            before.failure is not None
            and after.failure is not None
            and after.failure.kind == FailureKind.NO_HANDLER
        ):
            hint = f"{before.failure.hint}; or, with no ptrace at all: {after.failure.hint}"
            before.failure = replace(before.failure, hint=hint)
    return [replaced.get(id(o), o) for o in outcomes]


def _with_handler(files: dict[int, RankFiles], pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that describe an in-process handler in their runtime directory (then its
    flight recorder can be asked for: rankscope.stacks.inproc_request.find_handler)."""
    return [pid for pid in pids if pid in files and "inproc" in files[pid][2]]


def _other_version(version: Optional[int]) -> Optional[int]:
    """A handler's protocol when it differs from this rankscope's (None: py-spy, or the same)."""
    if version is None:
        return None
    from rankscope.inproc.handler import VERSION

    return version if version != VERSION else None


def _waits_for_gpu(final: list[ProcessSnapshot], raw: bool) -> bool:
    """Whether a rank's main thread waits for its GPU (then the GPUs are read). A raw answer looks
    only where the NVIDIA driver is (:data:`NVIDIA_CONTROL`), the frames' words imported then."""
    if not final or (raw and not os.path.exists(NVIDIA_CONTROL)):
        return False
    from rankscope.stacks.frames import locate

    return any(locate(t.frames).gpu_call for snap in final for t in snap.threads if t.is_main)


def run_local(
    options: StacksOptions,
    progress: Optional[Progress] = None,
    started: Optional[float] = None,
    stop: Optional[Stop] = None,
    raw: bool = False,
    source: Optional[NodeSource] = None,
) -> LocalResult:
    """Find, dump and diagnose; ``report.seconds`` is the wall time from ``started`` to the diagnosis.

    ``raw`` (a node's answer to a multi-node run, rankscope.stacks.node): the report holds the
    processes, jobs and failures but no groups, states or diagnosis, which the head derives from
    ``outcomes``' raw dumps; :class:`NeedsFullRun` before any dump when a rank's in-process handler
    would give its flight recorder. Not with --native or --via-signal.

    ``started`` (a time.monotonic() instant; default: now) lets a command count its own start-up.
    --deadline is counted from now. After a stop signal (``stop``, e.g. Ctrl-C) the dumps under way
    end at once and the report covers the samples taken so far (a note says so).

    ``source`` (with ``raw``): another node's processes and dumps instead of this node's; that node
    had no rankscope runtime files (its script hands over to its own rankscope where it has).
    """
    now = time.monotonic()
    started = now if started is None else min(started, now)
    host = short_hostname() if source is None else source.host
    pyspy = "" if options.via_signal or source is not None else find_pyspy()
    table = ProcessTable() if source is None else source.table
    jobs, strays, failures = resolve_jobs(options, table, host)
    targets: list[Target] = []
    seen: set[int] = set()
    for job in jobs:
        for worker in job.workers:
            if worker.pid not in seen:
                seen.add(worker.pid)
                targets.append(Target(worker.pid, worker.rank, worker.cmdline))
        if not job.workers and job.launcher_pid is not None:
            failures.append(
                Failure(
                    f"{job.launcher} pid {job.launcher_pid}",
                    Stage.DISCOVER,
                    "the launcher has no Python workers with a rank",
                    "the workers may not have started yet, or have all exited: read the job's log",
                    kind=FailureKind.NOTHING_THERE,
                )
            )
    for pid in options.pids:
        info = table.procs.get(pid)
        # A --pid that is neither a launcher nor a rank-carrying worker: dump it as given.
        if info is not None and pid not in seen and not any(j.launcher_pid == pid for j in jobs):
            seen.add(pid)
            targets.append(Target(pid, table.worker(pid, host).rank, info.command))

    samples_wanted = max(1, options.samples)
    outcomes_taken: list[tuple[int, DumpOutcome]] = []
    # One listing of the ranks' runtime directories: only a rank that describes an in-process handler
    # and loaded torch (its maps are read only then) holds a recorder to ask for. A raw answer lists
    # before its dumps (such a rank needs the full pipeline); a report lists while the first dumps run.
    files: Optional[dict[int, RankFiles]] = None if source is None else {}
    if raw and not options.no_fr and source is None:
        files = runtime_files(targets, host, table.procs)
        handled = _with_handler(files, [t.pid for t in targets if t.rank.rank is not None])
        if handled and any(torch_loaded(handled).values()):
            raise NeedsFullRun(host)
    deadline = now + options.deadline
    via_signal: set[int] = set()

    def dump(chosen: list[Target], native: bool, what: str) -> list[DumpOutcome]:
        def tick(done: int, total: int) -> None:
            if progress is not None:
                progress(f"dumping {done}/{total} {what}")

        if source is not None:
            return source.dump(chosen)
        if options.via_signal:
            from rankscope.stacks.inproc_collect import collect_via_signal

            via_signal.update(t.pid for t in chosen)
            return collect_via_signal(
                chosen, timeout=options.timeout, deadline=deadline, progress=tick, stop=stop, host=host
            )
        outcomes = collect(
            chosen,
            pyspy,
            native=native,
            with_locals=options.with_locals,
            timeout=options.timeout,
            deadline=deadline,
            parallelism=options.parallelism,
            progress=tick,
            stop=stop,
        )
        return outcomes if native else _signal_where_refused(outcomes, deadline, stop, host, via_signal)

    samples: list[list[ProcessSnapshot]] = []
    last: dict[int, DumpOutcome] = {}
    listing = None if raw or options.no_fr else (lambda: runtime_files(targets, host, table.procs))
    warm = Meanwhile(AFTER_DUMPS_RAW if raw else AFTER_DUMPS, then=listing)
    for index in range(samples_wanted):
        if index:
            _pause(max(0.0, min(options.interval, deadline - time.monotonic())), stop)
            if stop is not None and stop.signum:
                break
        sample = f" (sample {index + 1}/{samples_wanted})" if samples_wanted > 1 else ""
        outcomes = dump(targets, options.native_all, "processes" + sample)
        if index and stop is not None and stop.signum:
            break  # a sample cut short by a stop signal says nothing about motion: keep the earlier ones
        outcomes_taken.extend((index, o) for o in outcomes)
        samples.append([o.snapshot for o in outcomes if o.snapshot is not None])
        for outcome in outcomes:
            previous = last.get(outcome.target.pid)
            # Keep the latest successful dump of each process; remember failures only if none succeeded.
            if outcome.snapshot is not None or previous is None or previous.snapshot is None:
                last[outcome.target.pid] = outcome
    if listing is not None:
        files = warm.join() or runtime_files(targets, host, table.procs)
    warm.join()
    from rankscope.stacks.report import JobInfo, ProcessInfo, StacksReport, StrayInfo

    report = StacksReport(
        hosts=[host],
        jobs=[
            JobInfo(
                host,
                j.launcher,
                j.launcher_pid,
                j.launcher_cmdline,
                pids=[w.pid for w in j.workers],
                key=j.key.text() or None,
            )
            for j in jobs
            if j.launcher_pid or (j.launcher == NO_LAUNCHER and j.workers)
        ],
        strays=[
            StrayInfo(host, w.pid, w.rank.rank, w.rank.world_size, w.uid, w.cmdline, ns_pid=w.ns_pid)
            for w in strays
        ]
        or None,
        samples=samples_wanted,
        interval=options.interval if options.samples > 1 else 0.0,
        native=options.native or options.native_all,
    )
    result = LocalResult(report)
    result.outcomes = outcomes_taken
    if not raw:
        from rankscope.stacks.merge import group_snapshots, lend_native, motion, representatives
    states = {} if raw else motion(samples)
    final = [o.snapshot for o in last.values() if o.snapshot is not None]
    native_pids = {s.pid for s in final} if options.native_all else set()
    if options.native and not options.native_all and final and not (stop is not None and stop.signum):
        # Native frames cost 0.5-1 s a process: dump only representatives of each Python stack.
        chosen = set(representatives(final))
        outcomes = dump([t for t in targets if t.pid in chosen], True, "representatives natively")
        result.native_outcomes = outcomes
        native = {o.target.pid: o.snapshot for o in outcomes if o.snapshot is not None}
        native_pids = set(native)
        final = lend_native(final, native)
        failures.extend(_native_failure(o.failure) for o in outcomes if o.failure is not None)
    if not raw:
        report.groups = group_snapshots(final)
    resumed = {o.target.pid for _, o in result.outcomes if o.resumed}
    resumed.update(o.target.pid for o in result.native_outcomes if o.resumed)
    retries: dict[int, int] = {}
    held_by: dict[int, str] = {}
    for outcome in [*(o for _, o in result.outcomes), *result.native_outcomes]:
        if outcome.retries:
            retries[outcome.target.pid] = retries.get(outcome.target.pid, 0) + outcome.retries
            held_by[outcome.target.pid] = outcome.held_by
    if files is None or samples_wanted > 1:  # markers made during the samples are read too
        files = runtime_files(targets, host, table.procs)
    steps = read_steps(targets, host, files)
    ranked = [t.pid for t in targets if t.rank.rank is not None]
    handled = [] if raw or options.no_fr else _with_handler(files, ranked)  # a raw answer has no recorders
    loaded = torch_loaded(ranked) if handled else {}
    # After the stacks: a rank's handler thread writes its recorder while rankscope reads the others.
    # Each rank's dump within --timeout, as a stack dump (all at once; a rank's first takes 1-3 s).
    # Without a rank that loaded torch there is no recorder, and rankscope.fr is not even imported.
    if not raw and any(loaded.values()) and not (stop is not None and stop.signum):
        from rankscope.stacks.fr_live import gather as gather_recorders

        wait = min(deadline, time.monotonic() + options.timeout)
        result.recorders = gather_recorders(targets, wait, host, stop, loaded)
    ns_pids = {w.pid: w.ns_pid for job in jobs for w in job.workers if w.ns_pid is not None}
    for target in targets:
        outcome = last[target.pid]
        report.processes.append(
            ProcessInfo(
                pid=target.pid,
                rank=target.rank,
                cmdline=target.cmdline,
                state=states.get(target.pid),
                was_stopped=outcome.state_before in ("T", "t"),
                resumed=target.pid in resumed,
                dumped=outcome.snapshot is not None,
                native=target.pid in native_pids,
                retries=retries.get(target.pid),
                held_by=held_by.get(target.pid),
                via="signal" if target.pid in via_signal and outcome.snapshot is not None else None,
                progress=steps.get(target.pid),
                ns_pid=ns_pids.get(target.pid),
                handler_version=_other_version(outcome.handler_version),
            )
        )
        if outcome.failure is not None:
            failures.append(outcome.failure)
    if source is not None:
        if source.nvidia and _waits_for_gpu(final, False):
            raise NeedsFullRun(host)  # its GPUs are read there
    elif _waits_for_gpu(final, raw):
        from rankscope.stacks.gpu import query_gpus

        report.gpus = query_gpus(host)  # a rank waits for its GPU: is a kernel running there?
    report.failures = failures
    if not raw:
        from rankscope.stacks.analyse import diagnose

        report.diagnosis = diagnose(report)
    if stop is not None and stop.signum:
        taken = len(samples)
        if report.diagnosis is not None:  # a raw answer's head says it of the whole run
            report.diagnosis.notes.append(
                f"interrupted by {stop.name}"
                + (f" after {taken} of {report.samples} samples" if report.samples > 1 else "")
                + ": this report covers what was collected until then"
            )
        report.samples = max(1, taken)
    # The wall time from `started` (the CLI: the process start): discovery, every sample's dumps and the
    # waits between them, the diagnosis.
    report.seconds = time.monotonic() - started
    return result

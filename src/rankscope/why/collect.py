"""Every signal of a job in one pass with one deadline; each signal absent or refused becomes a line
of the report, never a failure. With files.py (what ranks leave behind) and output.py (the job's
own output) the only modules of `why` that run tools or read files.

Stacks, the ranks' live flight recorders, progress markers and the GPUs of ranks blocked on theirs
come from `stacks`' own pipeline (rankscope.stacks.local.run_local); then this node's kernel
messages, the ranks that already ended (their launcher's unreaped children), the ranks' crash and
SIGTERM dumps in their runtime directory, torchelastic error files, the job's output (found without
asking: the launcher's stdout/stderr when they are regular files, torchrun --log-dir, SLURM's
StdOut/StdErr; and --log) read by `logs errors`, flight-recorder dumps (--fr), the ranks' trace
rings (found without asking, or --trace) and cores (--cores). Each GPU's ECC errors and processes
come from the one GPU reader, rankscope.nvidia.read.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from rankscope import procfs
from rankscope.errors import MissingToolError, RankscopeError
from rankscope.ranks import short_hostname
from rankscope.why.files import (
    error_file,
    job_ranks,
    job_rings,
    log_dir_errors,
    read_cores,
    read_fr,
    read_rings,
    read_traces,
    recent_cores,
    runtime_files,
)
from rankscope.why.gpu import from_status, with_details
from rankscope.why.kernel import parse_kernel
from rankscope.why.options import WhyOptions
from rankscope.why.output import (
    log_starts,
    output_files,
    piped_files,
    read_logs,
    restart_starts,
    slurm_outputs,
    torchrun_log_dir,
    workers_started,
)
from rankscope.why.report import (
    ABSENT,
    FAILED,
    READ,
    REFUSED,
    SKIPPED,
    DeadRank,
    GpuFacts,
)
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.stacks.collect import Stop
    from rankscope.stacks.local import LocalResult
    from rankscope.stacks.report import StacksReport

Progress = Callable[[str], None]

#: Kernel messages read (the tail: the newest).
KERNEL_LINES = 20000
#: Variables torchrun and SLURM use for a rank's error file and its output.
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"


def _left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


# ----------------------------------------------------------------------------- stacks


def gather_stacks(options: WhyOptions, deadline: float, stop: Optional[Stop]) -> LocalResult:
    """`stacks`' pass over the job (its flight recorders, progress markers and GPUs included)."""
    from rankscope.stacks.local import run_local
    from rankscope.stacks.options import StacksOptions
    from rankscope.stacks.pyspy_cmd import DEFAULT_TIMEOUT

    pids = options.pids
    if options.slurm_job:
        from rankscope.cluster.slurm_local import slurm_job_pids

        pids = (*pids, *slurm_job_pids(options.slurm_job))
    budget = _left(deadline) * 0.7  # the rest is for the other signals
    stacks = StacksOptions(pids=pids, timeout=min(DEFAULT_TIMEOUT, budget), deadline=budget)
    try:
        try:
            return run_local(stacks, stop=stop)
        except MissingToolError:  # no py-spy: the ranks' in-process handlers alone (a signal, not a failure)
            result = run_local(replace(stacks, via_signal=True), stop=stop)
            assert result.report.diagnosis is not None
            result.report.diagnosis.notes.append(
                "py-spy is not installed: stacks only through in-process handlers"
            )
            return result
    except RankscopeError as err:  # the other signals are still read
        from rankscope.model import Failure, Stage
        from rankscope.stacks.local import LocalResult
        from rankscope.stacks.report import Diagnosis, StacksReport

        failure = Failure("stacks", Stage.DUMP, err.message, err.hint)
        return LocalResult(
            StacksReport(hosts=[short_hostname()], failures=[failure], diagnosis=Diagnosis(""))
        )


def gpu_details(gpus: list[GpuFacts], host: str, deadline: float) -> list[GpuFacts]:
    """ECC errors and the processes of each GPU from the one GPU reader (rankscope.nvidia.read: NVML,
    else ``nvidia-smi -q -x``); ``gpus`` as they are without it."""
    from rankscope import lifetime
    from rankscope.nvidia.read import import_nvml, read_nvidia

    def run(argv: Sequence[str]) -> Optional[str]:
        return lifetime.output(list(argv), min(5.0, _left(deadline)))

    info, _ = read_nvidia(import_nvml(), shutil.which("nvidia-smi"), run)
    return with_details(gpus, info, host) if info is not None else gpus


# ----------------------------------------------------------------------------- ended ranks


def exit_status(pid: int) -> Optional[tuple[Optional[int], Optional[int]]]:
    """(signal, exit code) of a zombie (an ended child its parent has not reaped); None otherwise."""
    raw = procfs.stat_fields(pid)
    if raw is None or raw[0] != "Z" or len(raw) < 50:
        return None
    status = int(raw[49])  # field 52, exit_code: as waitpid gives it
    if status & 0x7F:
        return status & 0x7F, None
    return None, (status >> 8) & 0xFF


def ended_ranks(launchers: Iterable[int], host: str) -> list[DeadRank]:
    """The launchers' children that ended and were not reaped yet (a launcher that has not noticed)."""
    table = procfs.table()
    out = []
    for launcher in launchers:
        for entry in table.values():
            if entry.ppid != launcher or entry.state != "Z":
                continue
            status = exit_status(entry.pid)
            if status is not None:
                out.append(DeadRank(entry.pid, None, status[0], status[1], host))
    return out


# ----------------------------------------------------------------------------- runtime files


# ----------------------------------------------------------------------------- the job's output


# ----------------------------------------------------------------------------- kernel


def read_kernel(deadline: float) -> tuple[Optional[str], str, str]:
    """(text, source, why not): ``dmesg``, else ``journalctl -k``."""
    from rankscope import lifetime

    reasons = []
    for argv in (
        ["dmesg", "--time-format", "iso"],
        ["journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"],
    ):
        tool = shutil.which(argv[0])
        if tool is None:
            reasons.append(f"{argv[0]} not found")
            continue
        child = lifetime.run([tool, *argv[1:]], min(3.0, _left(deadline)), capture=64 << 20)
        text = child.text()
        if child.timed_out:
            reasons.append(f"{argv[0]} did not answer in time")
        elif child.returncode == 0 and text.strip():
            return text, argv[0], ""
        elif child.returncode == 0:  # journalctl with no journal here (or none it may read) says nothing
            reasons.append(f"{argv[0]}: no messages")
        else:
            first = (
                text.strip().splitlines()[0] if text.strip() else f"exit code {child.returncode}, no output"
            )
            reasons.append(f"{argv[0]}: {first[:160]}")
    return None, "", "; ".join(reasons)


def event_time(text: Optional[str]) -> Optional[float]:
    """A kernel message's ISO time as a time.time() instant (None for times after boot, or none)."""
    if not text or "-" not in text:
        return None
    from datetime import datetime

    cleaned = text.replace(",", ".").replace(" ", "T", 1)
    if len(cleaned) > 5 and cleaned[-5] in "+-" and cleaned[-3] != ":":
        cleaned = cleaned[:-2] + ":" + cleaned[-2:]  # journalctl's +0000
    try:
        return datetime.fromisoformat(cleaned).timestamp()
    except ValueError:
        return None


def kernel_signal(
    text: Optional[str], source: str, why_not: str, gathered: Gathered, since: float = 0.0
) -> None:
    if text is None:
        permitted = not re.search(r"not permitted|permission denied|EPERM", why_not, re.IGNORECASE)
        state = ABSENT if permitted else REFUSED
        hint = (
            "" if permitted else " (reading kernel messages needs root or CAP_SYSLOG: kernel.dmesg_restrict)"
        )
        gathered.signal("kernel messages", state, why_not + hint)
        return
    lines = text.splitlines()[-KERNEL_LINES:]
    for event in parse_kernel(lines):
        moment = event_time(event.time)
        # a pid the job has now may have been another process's before it started
        if since and moment is not None and moment < since - 1:
            continue
        gathered.kernel.append(event)
    gathered.raw["kernel.txt"] = "\n".join(lines).encode()
    kinds = sorted({e.kind for e in gathered.kernel if e.pid is not None and e.pid in gathered.pid_rank})
    about = f"; about the job: {', '.join(kinds)}" if kinds else ""
    # an Xid of no pid of the job is the node's (its GPU), or another process's: said apart
    others = sorted({e.xid for e in gathered.kernel if e.xid is not None and e.pid not in gathered.pid_rank})
    if others:
        about += f"; NVIDIA Xid {', '.join(map(str, others))} of no process of the job"
    gathered.signal("kernel messages", READ, f"{source}: {len(lines)} lines{about}")


# ----------------------------------------------------------------------------- cores and recorders


# ----------------------------------------------------------------------------- the pass


def gather_local(
    options: WhyOptions,
    progress: Optional[Progress] = None,
    stop: Optional[Stop] = None,
    for_head: bool = False,
) -> Gathered:
    """One pass over this node's job and the inputs named, within ``options.timeout`` seconds.

    ``for_head``: this node answers a multi-node run: its ranks' flight recorders go along, compact,
    for the head to align every node's ranks.
    """
    deadline = time.monotonic() + options.timeout
    host = short_hostname()
    gathered = Gathered(hosts=[host])

    def say(what: str) -> None:
        if progress is not None:
            progress(what)

    job_pids: set[int] = set()
    workers: set[int] = set()  # the job's processes that run (no launcher, no rank that ended)
    launchers: list[int] = []
    log_dirs: list[str] = []
    started = 0.0
    logs: list[str] = list(options.logs)
    if options.post_mortem_only:
        gathered.signal("stacks", SKIPPED, "no --pid: only the inputs named were read")
    else:
        say("stacks")
        result = gather_stacks(options, deadline, stop)
        report = result.report
        gathered.stacks = report
        gathered.stacks_result = result
        gathered.failures.extend(report.failures)
        _loader_workers(report, deadline, gathered)
        dumped = sum(1 for p in report.processes if p.dumped)
        if report.processes:
            gathered.signal(
                "stacks", READ if dumped else FAILED, f"{dumped} of {len(report.processes)} processes dumped"
            )
        elif report.jobs:  # a launcher whose workers have all ended (a death caught as it happens)
            names = ", ".join(j.describe() for j in report.jobs)
            gathered.signal("stacks", ABSENT, f"no worker left to dump: {names} runs without any")
        else:
            gathered.signal("stacks", ABSENT, "no distributed job found on this node")
        if report.several_jobs():
            gathered.notes.append(
                f"{sum(1 for j in report.jobs if j.pids)} jobs run on this node and are weighed together: "
                "name one with --pid LAUNCHER_PID"
            )
        for process in report.processes:
            job_pids.add(process.pid)
            workers.add(process.pid)
            if process.rank.rank is not None:
                gathered.pid_rank[process.pid] = process.rank.rank
        steps = [p for p in report.processes if p.progress is not None]
        gathered.signal(
            "progress markers",
            READ if steps else ABSENT,
            f"{len(steps)} rank{'s' if len(steps) != 1 else ''} record one"
            if steps
            else "no rank records one (rankscope.progress)",
        )
        if result.recorders is not None and for_head:
            from rankscope.serial import to_json
            from rankscope.stacks.fr_live import compact

            report.fr_records = to_json(compact(result.recorders))
        if result.recorders is not None:
            from rankscope.stacks.fr_live import verdict

            live = verdict(result.recorders)
            if not live.empty:
                gathered.fr = live
                gathered.signal(
                    "flight recorders", READ, f"live, through the ranks' handlers: {live.headline}"
                )
            elif result.recorders.missing:  # why the handlers gave none (no torch, a dump torch refused ...)
                gathered.signal("flight recorders", ABSENT, "; ".join(live.notes))
            else:
                gathered.signal("flight recorders", ABSENT, "the ranks' recorders hold no entries")
        elif options.fr is None:
            gathered.signal(
                "flight recorders",
                ABSENT,
                "no rank's in-process handler answers (start the job with RANKSCOPE_INPROC=1)",
            )
        launchers = [j.launcher_pid for j in report.jobs if j.launcher_pid is not None]
        job_pids.update(launchers)
        started = max(_job_start(launchers or sorted(job_pids)), options.since or 0.0)
        gpus = report.gpus
        if gpus is None and (
            report.processes or report.jobs
        ):  # every rank's GPU; a job whose ranks all ended too
            from rankscope.stacks.gpu import query_gpus

            gpus = query_gpus(host)
        facts = from_status(gpus or [])
        if gpus is not None:  # ECC errors and the processes on each GPU too
            facts = gpu_details(facts, host, deadline)
        gathered.gpus.extend(facts)
        if facts:
            gathered.signal("GPU", READ, f"{len(facts)} GPUs ({facts[0].source})")
        elif report.processes or report.jobs:
            gathered.signal("GPU", ABSENT, "no NVML or nvidia-smi here")
        else:
            gathered.signal("GPU", ABSENT, "not read: no job on this node")
        # ranks that ended while the job runs, and what their runtime files say
        gathered.dead.extend(ended_ranks(launchers, host))
        job_pids.update(d.pid for d in gathered.dead)
        directories = _runtime_dirs([p.pid for p in report.processes], launchers)
        alive, world = job_ranks(report)
        files, ranks = runtime_files(directories, job_pids, started, host, alive, world, gathered.notes)
        gathered.rank_files.extend(files)
        for pid, rank in ranks.items():
            gathered.pid_rank.setdefault(pid, rank)
        _name_dead(gathered)
        if gathered.dead:
            gathered.signal("ended ranks", READ, ", ".join(_dead_words(d) for d in gathered.dead))
        crash = [f for f in files if f.kind in ("crash", "term")]
        gathered.signal(
            "crash and SIGTERM dumps",
            READ if crash else ABSENT,
            ", ".join(f"{f.kind} of rank {f.rank}" for f in crash)
            if crash
            else "none in the ranks' runtime directories",
        )
        # the job's output, found without asking
        logs += output_files([*launchers, *sorted(job_pids)])
        logs += piped_files([*launchers, *sorted(job_pids)])
        for launcher in launchers:
            cmd = procfs.cmdline(launcher)
            log_dir = torchrun_log_dir(cmd, procfs.cwd(launcher))
            if log_dir and os.path.isdir(log_dir):
                logs.append(log_dir)
                log_dirs.append(log_dir)
        slurm = options.slurm_job or _slurm_job(launchers or sorted(job_pids))
        if slurm:
            found, note = slurm_outputs(slurm, deadline)
            logs += found
            if note:
                gathered.notes.append(note)
        _error_files(sorted(job_pids), gathered, log_dirs, started)
        for pid in [*launchers, *sorted(job_pids)]:
            gathered.environ = _environ(pid)
            if gathered.environ:
                break
    if options.fr is not None:
        read_fr(options.fr, gathered)
    if options.trace is not None:
        read_traces(options.trace, gathered)
    elif job_pids:
        _found_rings(sorted(job_pids), started, gathered)
    if options.cores is not None:
        read_cores(options.cores, gathered)
    elif started:
        recent_cores(_cwd([*launchers, *sorted(job_pids)]), gathered, started, {*launchers, *job_pids})
    else:
        gathered.signal("cores", SKIPPED, "no job and no --cores DIR named")
    logs = list(dict.fromkeys(logs))
    if logs:
        say("job output")
        starts = log_starts(options.log_from)
        if workers and not starts:
            # a job that runs on after torchrun's restart: its current attempt's output is the evidence
            starts = restart_starts(logs, deadline, workers_started(workers))
            for path, start in starts.items():
                gathered.notes.append(
                    f"{path}: read from byte {start}, after torchrun restarted the workers (what the "
                    f"earlier attempts wrote before it: `rankscope why --log {path}`)"
                )
        read_logs(logs, gathered, deadline, stop, starts, options.since)
    else:
        gathered.signal(
            "job output",
            ABSENT,
            "no output file found (a pipe or a terminal is never read): name it with --log",
        )
    say("kernel messages")
    text, source, why_not = read_kernel(deadline)
    kernel_signal(text, source, why_not, gathered, started)
    if time.monotonic() > deadline:
        gathered.notes.append(f"the pass took longer than --timeout {options.timeout:g} s")
    return gathered


def _loader_workers(report: StacksReport, deadline: float, gathered: Gathered) -> None:
    """Where the DataLoader workers of the ranks that wait for their batch are (py-spy)."""
    from rankscope.why.loader import dump_workers

    workers = dump_workers(report, deadline)
    if workers:
        placed = [w for w in workers if w.location]
        gathered.loader_workers.extend(workers)
        gathered.signal(
            "DataLoader workers",
            READ,
            f"{len(workers)} workers of ranks that wait for their batch, {len(placed)} in the user's code",
        )


def _found_rings(pids: list[int], started: float, gathered: Gathered) -> None:
    """The job's trace rings with no --trace DIR: those its ranks hold open, and the rings written
    beside them since the job started (ranks that ended)."""
    rings, directories = job_rings(pids, started)
    if rings:
        read_rings(rings, gathered, "found without asking in " + ", ".join(directories))
    else:
        gathered.signal(
            "trace rings", ABSENT, "no rank runs under rankscope trace run (a ring elsewhere: --trace DIR)"
        )


def _dead_words(dead: DeadRank) -> str:
    from rankscope.why.findings import signal_name

    who = f"rank {dead.rank}" if dead.rank is not None else f"pid {dead.pid}"
    return f"{who}: " + (
        f"killed by {signal_name(dead.signal)}" if dead.signal else f"exit code {dead.exit_code}"
    )


def _name_dead(gathered: Gathered) -> None:
    """Ranks of ended workers: from their runtime file names; else the one rank the stacks miss."""
    for dead in gathered.dead:
        dead.rank = gathered.pid_rank.get(dead.pid)
    unnamed = [d for d in gathered.dead if d.rank is None]
    missing = gathered.stacks.diagnosis.missing_ranks if gathered.stacks and gathered.stacks.diagnosis else []
    free = [r for r in missing if r not in {d.rank for d in gathered.dead}]
    if len(unnamed) == 1 and len(free) == 1:
        unnamed[0].rank = free[0]
    for dead in gathered.dead:
        if dead.rank is not None:
            gathered.pid_rank.setdefault(dead.pid, dead.rank)


def _runtime_dirs(pids: Iterable[int], launchers: Iterable[int]) -> list[tuple[str, int]]:
    """The runtime directories of the ranks (from their environment) and of their launchers (the
    directory their ranks inherit: where the files of ranks that already ended are)."""
    from rankscope.inproc import runtime
    from rankscope.stacks.inproc_request import locate

    found: dict[str, int] = {}
    for pid in pids:
        try:
            directory, uid, _ = locate(pid)
        except OSError:
            continue
        found.setdefault(directory, uid)
    for launcher in launchers:
        owner = procfs.uid(launcher)
        environ = _environ(launcher)
        if owner is None or not environ:
            continue
        directory = runtime.runtime_dir(environ, owner)
        try:
            runtime.check_private(os.lstat(directory), owner)
        except OSError:
            continue
        found.setdefault(directory, owner)
    return list(found.items())


def _job_start(pids: Iterable[int]) -> float:
    """When the job's first process started, as a time.time() instant (0 when /proc does not say)."""
    starts = []
    for pid in pids:
        after_boot = procfs.started_after_boot(pid)
        if after_boot is not None:
            starts.append(time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - after_boot))
    return min(starts) if starts else 0.0


def _cwd(pids: Iterable[int]) -> Optional[str]:
    return next((found for found in map(procfs.cwd, pids) if found is not None), None)


def _environ(pid: int) -> dict[str, str]:
    """A process's environment; {} for one that ended or may not be read."""
    try:
        return procfs.environ(pid)
    except OSError:
        return {}


def _slurm_job(pids: Iterable[int]) -> Optional[str]:
    for pid in pids:
        job = _environ(pid).get("SLURM_JOB_ID")
        if job:
            return job
    return None


def _error_files(
    pids: Iterable[int], gathered: Gathered, log_dirs: Iterable[str] = (), since: float = 0.0
) -> None:
    """Each rank's TORCHELASTIC_ERROR_FILE (the launcher names one per worker), when written; and the
    ``error.json`` files under torchrun's --log-dir written since the job started (a rank that
    ended can no longer say where its file is)."""
    seen: set[str] = set()
    for pid in pids:
        env = _environ(pid)
        path = env.get(ERROR_FILE_VAR)
        if not path or not os.path.isfile(path):
            continue
        item = error_file(path)
        if item is None:
            continue
        rank = env.get("RANK")
        item.rank = int(rank) if rank and rank.isdigit() else gathered.pid_rank.get(pid)
        item.pid = pid
        gathered.rank_files.append(item)
        seen.add(os.path.realpath(path))
    for item in log_dir_errors(log_dirs, since, gathered.stacks):
        if os.path.realpath(item.path) not in seen:
            seen.add(os.path.realpath(item.path))
            gathered.rank_files.append(item)
    gathered.signal(
        "torchelastic error files",
        READ if seen else ABSENT,
        f"{len(seen)} written" if seen else "none written (main wrapped in @record writes one on an error)",
    )

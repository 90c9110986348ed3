"""Every signal of a job in one pass with one deadline (the only module of `why` that runs tools or
reads files); each signal absent or refused becomes a line of the report, never a failure.

Stacks, the ranks' live flight recorders, progress markers and the GPUs of ranks blocked on theirs
come from `stacks`' own pipeline (rankscope.stacks.local.run_local); then this node's kernel
messages, the ranks that already ended (their launcher's unreaped children), the ranks' crash and
SIGTERM dumps in their runtime directory, torchelastic error files, the job's output (found without
asking: the launcher's stdout/stderr when they are regular files, torchrun --log-dir, SLURM's
StdOut/StdErr; and --log) read by `logs errors`, flight-recorder dumps (--fr) and cores (--cores).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

from rankscope import procfs
from rankscope.errors import MissingToolError
from rankscope.ranks import short_hostname
from rankscope.why.gpu import from_status, with_details
from rankscope.why.kernel import parse_kernel
from rankscope.why.options import WhyOptions
from rankscope.why.report import (
    ABSENT,
    FAILED,
    READ,
    REFUSED,
    SKIPPED,
    CoreInfo,
    DeadRank,
    GpuFacts,
    RankFile,
)
from rankscope.why.scheduler import scheduler_findings
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.stacks.collect import Stop
    from rankscope.stacks.local import LocalResult

Progress = Callable[[str], None]

#: The most of one rank file (crash, term, error file) read.
FILE_MAX = 4 << 20
#: Kernel messages read (the tail: the newest).
KERNEL_LINES = 20000
#: Variables torchrun and SLURM use for a rank's error file and its output.
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
_LOG_DIR = re.compile(r"^--log[-_]dir(?:=(.*))?$")


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
        return run_local(stacks, stop=stop)
    except MissingToolError:  # no py-spy: the ranks' in-process handlers alone (a signal, not a failure)
        result = run_local(replace(stacks, via_signal=True), stop=stop)
        assert result.report.diagnosis is not None
        result.report.diagnosis.notes.append(
            "py-spy is not installed: stacks only through in-process handlers"
        )
        return result


def gpu_details(gpus: list[GpuFacts], host: str, deadline: float) -> list[GpuFacts]:
    """ECC errors and the processes of each GPU (`nvidia-smi -q -x`); ``gpus`` as they are without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return gpus
    from rankscope import lifetime
    from rankscope.doctor.nvsmi import parse_query_xml

    child = lifetime.run([smi, "-q", "-x"], min(5.0, _left(deadline)), capture=16 << 20)
    if child.timed_out or child.returncode != 0:
        return gpus
    try:
        return with_details(gpus, parse_query_xml(child.text()), host)
    except ValueError:
        return gpus


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


def runtime_files(
    directories: Iterable[tuple[str, int]], pids: set[int], since: float, host: str
) -> tuple[list[RankFile], dict[int, int]]:
    """The ranks' ``.crash``/``.term`` dumps in their runtime directories (of the job's pids, or
    written since the job started), and pid -> rank from every file name there."""
    from rankscope.inproc import runtime

    files: list[RankFile] = []
    ranks: dict[int, int] = {}
    for directory, uid in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            parsed = runtime.parse_name(name)
            if parsed is None or parsed[0] != host:
                continue
            _, rank, pid, kind = parsed
            path = os.path.join(directory, name)
            if rank is not None and (pid in pids or kind in ("crash", "term")):
                ranks.setdefault(pid, rank)
            if kind not in ("crash", "term"):
                continue
            try:
                if pid not in pids and os.lstat(path).st_mtime < since:
                    continue
                text = runtime.read_owned(path, uid, FILE_MAX).decode("utf-8", "replace")
            except OSError:
                continue
            item = rank_file(path, text)
            if item is not None:
                files.append(item)
            if rank is not None:
                ranks.setdefault(pid, rank)
    return files, ranks


def rank_file(path: str, text: str) -> Optional[RankFile]:
    """A rank's ``<base>.crash`` or ``<base>.term`` (faulthandler's text) as a RankFile; None when empty."""
    from rankscope.inproc import runtime
    from rankscope.stacks.inproc_text import parse_faulthandler

    name = os.path.basename(path)
    parsed = runtime.parse_name(name)
    rank, pid = (parsed[1], parsed[2]) if parsed is not None else (None, None)
    kind = "term" if name.endswith(".term") else "crash"
    if not text.strip():
        return None
    crashed = re.search(
        r"^Current thread 0x([0-9a-fA-F]+)", text, re.MULTILINE
    )  # the thread that got the signal
    try:
        threads = parse_faulthandler(
            text, pid or 0, main_ident=int(crashed.group(1), 16) if crashed else None
        )
    except ValueError:
        threads = []
    current = next((t for t in threads if t.frames), None)
    location = user_frame_words(current.frames) if current is not None else None
    head = next((line for line in text.splitlines() if line.startswith("Fatal Python error")), "")
    what = head or ("SIGTERM" if kind == "term" else "a fatal signal")
    return RankFile(kind, path, rank, pid, location, what)


def user_frame_words(frames: Iterable[object]) -> Optional[str]:
    from rankscope.model import Frame
    from rankscope.stacks.explain import is_library
    from rankscope.why.weigh import frame_words

    user = [f for f in frames if isinstance(f, Frame) and not is_library(f) and f.line]
    return frame_words(user[-1]) if user else None


def error_file(path: str) -> Optional[RankFile]:
    """A torchelastic error file (``@record``'s JSON): the exception, its time and the user's frame."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = f.read(FILE_MAX)
    try:
        data = json.loads(raw)
        message = data["message"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(message, str):
        return RankFile(
            "error_file", path, None, what=message.strip().splitlines()[-1] if message.strip() else ""
        )
    if not isinstance(message, dict):
        return None
    text = str(message.get("message", "")).strip()
    extra = message.get("extraInfo") or {}
    stack = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
    location = None
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', stack)
    user = [f for f in frames if "/site-packages/" not in f[0] and "/lib/python" not in f[0]]
    if user:
        file, line, function = user[-1]
        location = f"{function} ({os.path.basename(file)}:{line})"
    when = str(extra.get("timestamp", "")) if isinstance(extra, dict) else ""
    moment = None
    if when.isdigit():
        moment = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(when)))
    last = text.splitlines()[-1] if text else ""
    return RankFile("error_file", path, None, location=location, what=last, time=moment)


# ----------------------------------------------------------------------------- the job's output


def output_files(pids: Iterable[int]) -> list[str]:
    """stdout/stderr of these processes that are regular files (never a pipe or a terminal: reading
    one would take the job's own output), each file once."""
    seen: set[tuple[int, int]] = set()
    out = []
    for pid in pids:
        for fd in (1, 2):
            link = f"/proc/{pid}/fd/{fd}"
            try:
                st = os.stat(link)
                target = os.readlink(link)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            out.append(link if target.endswith(" (deleted)") or not os.path.isabs(target) else target)
    return out


def torchrun_log_dir(cmdline: list[str], cwd: Optional[str]) -> Optional[str]:
    """torchrun's ``--log-dir DIR`` (``--log_dir``), relative to its working directory."""
    for index, word in enumerate(cmdline):
        match = _LOG_DIR.match(word)
        if match is None:
            continue
        value = (
            match.group(1)
            if match.group(1) is not None
            else (cmdline[index + 1] if index + 1 < len(cmdline) else None)
        )
        if value:
            return value if os.path.isabs(value) or cwd is None else os.path.join(cwd, value)
    return None


def slurm_output_paths(text: str) -> list[str]:
    """StdOut= and StdErr= of ``scontrol show job`` (each path once; ``StdIn=/dev/null`` is not output)."""
    return list(dict.fromkeys(re.findall(r"\bStd(?:Out|Err)=(\S+)", text)))


def slurm_outputs(job: str, deadline: float) -> tuple[list[str], str]:
    """StdOut/StdErr of a SLURM job (``scontrol show job``); and a note when they cannot be asked."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return [], "scontrol not found: SLURM's StdOut/StdErr not read"
    from rankscope import lifetime

    child = lifetime.run([scontrol, "show", "job", job], min(5.0, _left(deadline)))
    if child.timed_out or child.returncode != 0:
        return [], f"scontrol show job {job}: " + (child.text().strip()[:200] or "no answer")
    return [p for p in slurm_output_paths(child.text()) if os.path.isfile(p)], ""


#: The end of each output file searched for the scheduler's words (they are among its last lines).
SCHEDULER_TAIL = 1 << 20


def _scheduler_lines(paths: list[str]) -> Iterable[tuple[str, int, str]]:
    """(file, line number, line) of the slurmstepd lines at the end of each output file."""
    for path in paths:
        files = (
            sorted(str(p) for p in Path(path).rglob("*") if p.is_file()) if os.path.isdir(path) else [path]
        )
        for file in files:
            try:
                fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            with open(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                start = max(0, os.fstat(fd).st_size - SCHEDULER_TAIL)
                f.seek(start)
                data = f.read(SCHEDULER_TAIL)
            # line numbers of a longer file count from where its last MiB starts
            source = f"{file} (its last MiB)" if start else file
            for number, raw in enumerate(data.split(b"\n"), 1):
                if b"slurmstepd" in raw:
                    yield source, number, raw.decode("utf-8", "replace")


class _Deadline:
    """What `logs`' reader asks between blocks (a StopSignals' ``signum`` and ``name``): set once the
    pass's deadline passed or a stop signal came, so the job's output is read as far as time allows."""

    def __init__(self, deadline: Optional[float], stop: Optional[Stop]) -> None:
        self.deadline = deadline
        self.stop = stop

    @property
    def signum(self) -> int:
        if self.stop is not None and self.stop.signum:
            return int(self.stop.signum)
        return 1 if self.deadline is not None and time.monotonic() > self.deadline else 0

    @property
    def name(self) -> str:
        return "the deadline (--timeout)"


def read_logs(
    paths: list[str], gathered: Gathered, deadline: Optional[float] = None, stop: Optional[Stop] = None
) -> None:
    """The job's output through `logs errors`: its findings and the user frames of its tracebacks."""
    from rankscope.errors import RankscopeError
    from rankscope.logs.errors_report import scan_errors
    from rankscope.logs.reading import Reading
    from rankscope.logs.roles import user_frame
    from rankscope.logs.sources import discover

    try:
        reading = Reading(discover(paths), stop=cast(Any, _Deadline(deadline, stop)))
        report, counts = scan_errors(reading)
    except (RankscopeError, OSError) as err:
        gathered.signal("job output", FAILED, f"{', '.join(paths)}: {getattr(err, 'message', err)}")
        return
    gathered.logs.extend(paths)
    for group in report.groups:
        tb = group.timed or group.example
        frame = user_frame(tb.frames)
        if frame is not None:
            gathered.log_places[(tb.source, tb.line_number)] = (
                f"{frame.function} ({os.path.basename(frame.filename)}:{frame.line})"
            )
    # the user's frame as `function (file:line)`, so the finding says it wherever it is weighed (a head)
    gathered.log_findings.extend(
        replace(f, where=gathered.log_places[(f.source, f.line)])
        if (f.source, f.line) in gathered.log_places
        else f
        for f in counts.findings
    )
    gathered.log_findings.extend(scheduler_findings(_scheduler_lines(paths)))
    read = f"{len(paths)} file{'s' if len(paths) > 1 else ''} ({', '.join(paths)}): {counts.lines} lines"
    read += f", {counts.tracebacks} traceback{'s' if counts.tracebacks != 1 else ''}"
    gathered.signal("job output", READ, read)
    for skipped in reading.skipped:
        gathered.notes.append(f"job output: {skipped}")
    if reading.interrupted:
        gathered.notes.append(f"job output: read until {reading.interrupted}; the rest was not read")


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
    kinds = sorted({e.kind for e in gathered.kernel if e.kind == "xid" or e.pid in gathered.pid_rank})
    about = f"; about the job: {', '.join(kinds)}" if kinds else ""
    gathered.signal("kernel messages", READ, f"{source}: {len(lines)} lines{about}")


# ----------------------------------------------------------------------------- cores and recorders


def read_cores(directory: str, gathered: Gathered, since: float = 0.0) -> None:
    from rankscope.core.listing import is_core
    from rankscope.core.notes import NotACoreError, read_notes

    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        gathered.signal("cores", FAILED, f"{directory}: {err.strerror or err}")
        return
    for name in names:
        path = os.path.join(directory, name)
        if not is_core(path):
            continue
        try:
            if since and os.lstat(path).st_mtime < since:
                continue
            notes = read_notes(path)
        except (NotACoreError, OSError) as err:
            gathered.notes.append(f"core {path}: {err}")
            continue
        rank_text = notes.env.get("RANK") or notes.env.get("SLURM_PROCID")
        rank = int(rank_text) if rank_text and rank_text.isdigit() else None
        gathered.cores.append(CoreInfo(path, notes.pid, rank, notes.signal, notes.program))
        if notes.pid is not None and rank is not None:
            gathered.pid_rank.setdefault(notes.pid, rank)
    found = len(gathered.cores)
    gathered.signal(
        "cores", READ if found else ABSENT, f"{directory}: {found} core{'s' if found != 1 else ''}"
    )


def read_traces(path: str, gathered: Gathered) -> None:
    """Where each rank's trace ring (``rankscope trace run``) last saw it; only the end of each file is read."""
    from rankscope.errors import RankscopeError
    from rankscope.trace.analyse import where
    from rankscope.trace.collect import open_trace, trace_files
    from rankscope.trace.decode import read_tail

    try:
        files = trace_files(path)
    except RankscopeError as err:
        gathered.signal("trace rings", FAILED if os.path.lexists(path) else ABSENT, err.message)
        return
    unreadable = 0
    for file in files:
        try:
            with open_trace(file) as opened:
                data = read_tail(opened.layout, opened.source, 1)
        except RankscopeError:
            unreadable += 1
            continue
        if data.rank is not None:
            gathered.traced[data.rank] = where(data)
    detail = f"{path}: {len(gathered.traced)} ranks" + (
        f", {unreadable} files unreadable" if unreadable else ""
    )
    gathered.signal("trace rings", READ if gathered.traced else FAILED, detail)


def read_fr(path: str, gathered: Gathered) -> None:
    from rankscope.errors import RankscopeError
    from rankscope.fr.align import analyse
    from rankscope.fr.collect import read_dumps

    try:
        collected = read_dumps(Path(path))
    except (RankscopeError, OSError) as err:
        gathered.signal("flight recorders", FAILED, f"{path}: {getattr(err, 'message', err)}")
        return
    report = analyse(collected.dumps, collected.unreadable, None, collected.refused)
    gathered.fr = report
    state = ABSENT if report.empty else READ
    gathered.signal("flight recorders", state, f"{path}: {len(collected.dumps)} dumps; {report.headline}")


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
    launchers: list[int] = []
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
        dumped = sum(1 for p in report.processes if p.dumped)
        if report.processes:
            gathered.signal(
                "stacks", READ if dumped else FAILED, f"{dumped} of {len(report.processes)} processes dumped"
            )
        else:
            gathered.signal("stacks", ABSENT, "no distributed job found on this node")
        for process in report.processes:
            job_pids.add(process.pid)
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
        started = _job_start(launchers or sorted(job_pids))
        gpus = from_status(report.gpus or [])
        if report.gpus is not None:  # a rank waits for its GPU: its ECC errors and processes too
            gpus = gpu_details(gpus, host, deadline)
        gathered.gpus.extend(gpus)
        gathered.signal("GPU", READ if gpus else ABSENT if report.gpus is not None else SKIPPED,
                        f"{len(gpus)} GPUs" if gpus else "no rank waits for its GPU: not asked"
                        if report.gpus is None else "no NVML or nvidia-smi here")  # fmt: skip
        # ranks that ended while the job runs, and what their runtime files say
        gathered.dead.extend(ended_ranks(launchers, host))
        job_pids.update(d.pid for d in gathered.dead)
        directories = _runtime_dirs([p.pid for p in report.processes], launchers)
        files, ranks = runtime_files(directories, job_pids, started, host)
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
        for launcher in launchers:
            cmd = procfs.cmdline(launcher)
            try:
                cwd: Optional[str] = os.readlink(f"/proc/{launcher}/cwd")
            except OSError:
                cwd = None
            log_dir = torchrun_log_dir(cmd, cwd)
            if log_dir and os.path.isdir(log_dir):
                logs.append(log_dir)
        slurm = options.slurm_job or _slurm_job(launchers or sorted(job_pids))
        if slurm:
            found, note = slurm_outputs(slurm, deadline)
            logs += found
            if note:
                gathered.notes.append(note)
        _error_files(sorted(job_pids), gathered)
        for pid in [*launchers, *sorted(job_pids)]:
            gathered.environ = _environ(pid)
            if gathered.environ:
                break
    if options.fr is not None:
        read_fr(options.fr, gathered)
    if options.trace is not None:
        read_traces(options.trace, gathered)
    if options.cores is not None:
        read_cores(options.cores, gathered)
    else:
        gathered.signal("cores", SKIPPED, "no --cores DIR named")
    logs = list(dict.fromkeys(logs))
    if logs:
        say("job output")
        read_logs(logs, gathered, deadline, stop)
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


def _dead_words(dead: DeadRank) -> str:
    from rankscope.why.weigh import signal_name

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
    from rankscope.stacks.inproc_collect import locate

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


def _error_files(pids: Iterable[int], gathered: Gathered) -> None:
    """Each rank's TORCHELASTIC_ERROR_FILE (the launcher names one per worker), when written."""
    found = 0
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
        found += 1
    gathered.signal(
        "torchelastic error files",
        READ if found else ABSENT,
        f"{found} written" if found else "none written (main wrapped in @record writes one on an error)",
    )

"""What ranks leave behind, read for `rankscope why` (I/O; each file opened without following a link or
blocking, and read only when it is a regular file, within a size bound): the ranks' ``.crash`` and
``.term`` dumps in their runtime directories (faulthandler's text, read by stacks/inproc_text.py),
torchelastic error files, core files' notes, trace rings, flight-recorder dumps."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rankscope.why.report import ABSENT, FAILED, READ, CoreInfo, RankFile
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.stacks.report import StacksReport

#: The most of one rank file (crash, term, error file) read.
FILE_MAX = 4 << 20


def runtime_files(
    directories: Iterable[tuple[str, int]],
    pids: set[int],
    since: float,
    host: str,
    live: Optional[dict[int, int]] = None,
    world: Optional[int] = None,
    notes: Optional[list[str]] = None,
) -> tuple[list[RankFile], dict[int, int]]:
    """The ranks' ``.crash``/``.term`` dumps in their runtime directories (of the job's pids, or
    written since the job started), and pid -> rank from their names and those of the job's pids.

    The directory is shared by every job of the user: a file of a pid not the job's names a rank of
    the job only when written since the job started, by a rank the job has (below ``world``, its
    world size) and that none of its live ranks (``live``: rank -> pid) is; any other is another
    job's or the pid's earlier owner's, and is left out (a dump with a note in ``notes``)."""
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
            try:
                written = os.lstat(path).st_mtime
            except OSError:
                continue
            if written < (since if pid not in pids else _started(pid)):
                continue  # an earlier job's, or a file of the pid's earlier owner (pids come round)
            if rank is not None and pid in pids:
                ranks.setdefault(pid, rank)
            if kind not in ("crash", "term"):
                continue
            other = None if pid in pids else _not_the_jobs(rank, pid, live or {}, world)
            if other is not None:
                if notes is not None:
                    notes.append(f"{kind} dump {path} (pid {pid}): {other}, left out")
                continue
            try:
                text = runtime.read_owned(path, uid, FILE_MAX).decode("utf-8", "replace")
            except OSError:
                continue
            item = rank_file(path, text)
            if item is not None:
                files.append(item)
            if rank is not None:
                ranks.setdefault(pid, rank)
    return files, ranks


def _not_the_jobs(rank: Optional[int], pid: int, live: dict[int, int], world: Optional[int]) -> Optional[str]:
    """Why the dump of ``rank`` by ``pid`` (not a process of the job) is another job's; None when it
    may be a rank of the job that ended."""
    if rank is None:
        return None
    if world is not None and rank >= world:
        return f"rank {rank} is not one of the job's {world} ranks"
    if rank in live and live[rank] != pid:
        return f"the job's rank {rank} is pid {live[rank]}"
    return None


def job_ranks(stacks: Optional[StacksReport]) -> tuple[dict[int, int], Optional[int]]:
    """The job's live ranks (rank -> pid) and its world size (None when no rank says it)."""
    processes = stacks.processes if stacks is not None else []
    alive = {p.rank.rank: p.pid for p in processes if p.rank.rank is not None}
    world = max((p.rank.world_size or 0 for p in processes), default=0) or None
    return alive, world


def _started(pid: int) -> float:
    """When ``pid`` started, as a time.time() instant, less a second of slack (0 when /proc does not say)."""
    from rankscope import procfs

    after_boot = procfs.started_after_boot(pid)
    if after_boot is None:
        return 0.0
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - after_boot) - 1.0


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
    from rankscope.stacks.frames import is_library
    from rankscope.why.findings import frame_words

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


def log_dir_errors(log_dirs: Iterable[str], since: float, stacks: Optional[StacksReport]) -> list[RankFile]:
    """``<log-dir>/<run id>/attempt_<n>/<local rank>/error.json`` written since ``since``; the global
    rank from the local rank and the node's place (node rank x local world size, as its live ranks say)."""
    node = None
    for process in stacks.processes if stacks is not None else []:
        rank = process.rank
        if rank.node_rank is not None and rank.local_world_size:
            node = (rank.node_rank, rank.local_world_size)
            break
    out = []
    for directory in log_dirs:
        for path in sorted(Path(directory).glob("*/attempt_*/*/error.json")):
            try:
                if path.is_symlink() or path.stat().st_mtime < since:
                    continue
            except OSError:
                continue
            item = error_file(str(path))
            if item is None:
                continue
            local = path.parent.name
            if local.isdigit() and node is not None:
                item.rank = node[0] * node[1] + int(local)
            out.append(item)
    return out


def read_cores(directory: str, gathered: Gathered, since: float = 0.0) -> None:
    """The notes of every core in ``directory`` (``--cores DIR``, or a bundle's ``cores/``)."""
    try:
        os.listdir(directory)
    except OSError as err:
        gathered.signal("cores", FAILED, f"{directory}: {err.strerror or err}")
        return
    found = _cores_in([directory], gathered, since)
    gathered.signal(
        "cores", READ if found else ABSENT, f"{directory}: {found} core{'s' if found != 1 else ''}"
    )


def recent_cores(
    cwd: Optional[str], gathered: Gathered, since: float, job_pids: Optional[Iterable[int]] = None
) -> None:
    """Cores written since the job started where this node puts them (kernel.core_pattern's directory,
    the job's working directory, apport's and systemd's places): a rank that crashed and is gone.
    ``job_pids``: the job's processes; a core of another process with no rank variable is some other
    program's (a note says so), not the job's, and so is a rank's core of another job: its rendezvous
    variables are not the job's, or its rank is not one the job has or one of its live ranks."""
    from rankscope import procfs
    from rankscope.core.listing import default_places

    pattern = procfs.core_pattern()
    if pattern is not None and pattern.startswith("|"):
        pattern = None  # piped to a program (systemd-coredump, apport): `rankscope core list` finds those
    places = default_places(pattern, cwd or "/nonexistent")
    pids = None if job_pids is None else set(job_pids)
    found = _cores_in(places, gathered, since, pids, _job_marks(pids or set()))
    where = ", ".join(p for p in places if os.path.isdir(p))
    gathered.signal(
        "cores",
        READ if found else ABSENT,
        f"{found} written since the job started ({where})"
        if found
        else f"none since the job started ({where})",
    )


#: What tells one job's ranks from another's in their environments (rankscope.jobkey's evidence).
JOB_MARKS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


def _job_marks(job_pids: set[int]) -> dict[str, str]:
    """The :data:`JOB_MARKS` of the job's first rank whose environment can be read ({} when none)."""
    from rankscope import procfs

    for pid in sorted(job_pids):
        try:
            env = procfs.environ(pid)
        except (OSError, ValueError):
            continue
        if env and ("RANK" in env or "SLURM_PROCID" in env):
            return {name: env[name] for name in JOB_MARKS if env.get(name)}
    return {}


def _cores_in(
    directories: Iterable[str],
    gathered: Gathered,
    since: float,
    job_pids: Optional[set[int]] = None,
    marks: Optional[dict[str, str]] = None,
) -> int:
    from rankscope.core.listing import is_core
    from rankscope.core.notes import NotACoreError, read_notes

    found = 0
    for directory in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                if since and os.lstat(path).st_mtime < since:
                    continue
            except OSError:
                continue
            if not is_core(path):
                continue
            try:
                notes = read_notes(path)
            except (NotACoreError, OSError) as err:
                gathered.notes.append(f"core {path}: {err}")
                continue
            rank_text = notes.env.get("RANK") or notes.env.get("SLURM_PROCID")
            rank = int(rank_text) if rank_text and rank_text.isdigit() else None
            if job_pids is not None and notes.pid not in job_pids:
                other = [k for k, v in (marks or {}).items() if notes.env.get(k) != v]
                why: Optional[str] = None  # another program, or a rank of another job
                if rank is None:
                    why = "not a process of this job"
                elif other:
                    why = f"its {other[0]} is not the job's"
                else:
                    why = _not_the_jobs(rank, notes.pid or 0, *job_ranks(gathered.stacks))
                if why is not None:
                    gathered.notes.append(f"core {path} (pid {notes.pid}, {notes.program}): {why}, left out")
                    continue
            gathered.cores.append(CoreInfo(path, notes.pid, rank, notes.signal, notes.program))
            found += 1
            if notes.pid is not None and rank is not None:
                gathered.pid_rank.setdefault(notes.pid, rank)
    return found


def read_traces(path: str, gathered: Gathered) -> None:
    """Where each rank's trace ring (``rankscope trace run``) last saw it; only the end of each file is read."""
    from rankscope.errors import RankscopeError
    from rankscope.trace.collect import trace_files

    try:
        files = trace_files(path)
    except RankscopeError as err:
        gathered.signal("trace rings", FAILED if os.path.lexists(path) else ABSENT, err.message)
        return
    read_rings([str(f) for f in files], gathered, path)


def read_rings(files: Iterable[str], gathered: Gathered, where: str) -> None:
    """The end of each ring file: where its rank last was; one signal line saying ``where`` they are."""
    from rankscope.errors import RankscopeError
    from rankscope.trace.analyse import where as last_place
    from rankscope.trace.collect import open_trace
    from rankscope.trace.decode import read_tail

    unreadable = 0
    read = 0
    for file in files:
        try:
            with open_trace(Path(file)) as opened:
                data = read_tail(opened.layout, opened.source, 1)
        except RankscopeError:
            unreadable += 1
            continue
        read += 1
        if data.rank is not None:
            gathered.traced[data.rank] = last_place(data)
    detail = f"{where}: {read} ring{'s' if read != 1 else ''}, {len(gathered.traced)} ranks" + (
        f", {unreadable} files unreadable" if unreadable else ""
    )
    gathered.signal("trace rings", READ if gathered.traced else FAILED, detail)


#: A ring's name (rankscope.trace.writer.trace_name): ``trace-{host}-{rank}-{pid}``, ``.N`` for a later
#: tracing of the same process.
_RING = re.compile(r"^trace-.+-(?:\d+|x)-\d+(?:\.\d+)?$")


def job_rings(pids: Iterable[int], since: float) -> tuple[list[str], list[str]]:
    """(ring files, their directories) of a job, found without asking: the ``trace-*`` files its
    processes hold open (``rankscope trace run``, ``rankscope.trace.start``), and beside them every
    ring written since the job started (those of ranks that already ended)."""
    from rankscope import procfs

    held: list[str] = []
    for pid in pids:
        try:
            links = procfs.fd_links(pid)
        except OSError:
            continue
        held += [t for _, t in links if os.path.isabs(t) and _RING.match(os.path.basename(t))]
    directories = sorted({os.path.dirname(p) for p in held})
    found = dict.fromkeys(held)
    for directory in directories:
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not _RING.match(entry.name) or not entry.is_file(follow_symlinks=False):
                        continue
                    if entry.stat(follow_symlinks=False).st_mtime >= since - 1:  # not an earlier job's
                        found.setdefault(entry.path)
        except OSError:
            continue
    return sorted(found), directories


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

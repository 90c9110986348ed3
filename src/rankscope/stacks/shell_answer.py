"""The head's reading of a node's shell answer (rankscope.stacks.shell_node): its raw answer, made here.

The script sends /proc's raw files and py-spy's dumps; this module rebuilds that node's process
table from them (entries that answer from the snapshot, never from this machine's /proc) and runs
the raw pipeline a node's own rankscope runs (:func:`rankscope.stacks.local.run_local` with
``raw``), so discovery, ranks, jobs, strays and failures are the same code's. What the snapshot
cannot answer raises :class:`NeedsNode`: the head then asks that node's own rankscope
(rankscope.cluster.stacks_remote).

Pure: no process, no file, no clock beyond run_local's own timing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope import procfs
from rankscope.model import FailureKind, ProcessSnapshot, Stage
from rankscope.procfs import ProcfsEntry
from rankscope.procs import ProcessTable
from rankscope.stacks.collect import DumpOutcome, Target
from rankscope.stacks.local import LocalResult, NeedsFullRun, run_local
from rankscope.stacks.node import node_document, raw_name
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.report import StacksReport
from rankscope.stacks.saved import from_dumps
from rankscope.stacks.shell_node import SNAPSHOT_MAGIC


class NeedsNode(Exception):
    """The snapshot does not say what the node's own run would read: ask that node's rankscope."""


def is_snapshot(stdout: str) -> bool:
    """Whether a node answered with the script's snapshot (anywhere: a login banner may come first)."""
    return SNAPSHOT_MAGIC + " " in stdout


@dataclass
class Snapshot:
    """What one node's script sent (see rankscope.stacks.shell_node for each file)."""

    host: str = ""
    nvidia: bool = False
    timeout: str = ""
    #: The script and its ancestors there: never targets.
    own: set[int] = field(default_factory=set)
    #: Pids dumped, and pids whose dump ran out of time.
    dumped: set[int] = field(default_factory=set)
    timed_out: set[int] = field(default_factory=set)
    stats: dict[int, tuple[str, str, int, int]] = field(default_factory=dict)
    environs: dict[int, bytes] = field(default_factory=dict)
    cmdlines: dict[int, list[str]] = field(default_factory=dict)
    uids: dict[int, int] = field(default_factory=dict)
    ns_pids: dict[int, list[int]] = field(default_factory=dict)
    #: The candidates whose names did not say Python, which map an interpreter.
    mapped: set[int] = field(default_factory=set)
    #: Those whose maps were read at all.
    maps_read: set[int] = field(default_factory=set)
    dumps: dict[int, bytes] = field(default_factory=dict)


def _pid_records(lines: list[str], kind: str) -> list[tuple[int, str]]:
    """``PID/kind:value`` lines (grep -H over /proc's files) as (pid, value)."""
    return [(pid, value) for pid, name, value in _proc_records(lines) if name == kind]


def _proc_records(lines: list[str]) -> list[tuple[int, str, str]]:
    """``PID/KIND:value`` lines (grep -H over /proc's files, a record a line) as (pid, kind, value)."""
    out = []
    for record in lines:
        head, sep, value = record.partition(":")
        pid, slash, kind = head.partition("/")
        if sep and slash and pid.isdigit():
            out.append((int(pid), kind, value))
    return out


def _stat_line(line: str) -> Optional[tuple[int, tuple[str, str, int, int]]]:
    open_paren, close_paren = line.find("("), line.rfind(")")
    if open_paren < 1 or close_paren < open_paren:
        return None
    fields = line[close_paren + 2 :].split()
    try:
        pid = int(line[: open_paren - 1])
        return pid, (line[open_paren + 1 : close_paren], fields[0], int(fields[1]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def parse(stdout: str) -> Snapshot:
    """The script's answer (its first line, then one ``grep -H`` of /proc's files and its own: every line
    behind the name of the file it comes from); ValueError if it is not one."""
    found = re.search(re.escape(SNAPSHOT_MAGIC) + r" ([0-9a-f]+) (\S+)\n", stdout)
    if found is None:
        raise ValueError("not a node snapshot")
    own = found.group(2) + "."
    files: dict[str, list[str]] = {"proc": []}
    for line in stdout[found.end() :].split("\n"):
        path, sep, value = line.partition(":")
        if not sep:
            continue
        if path.startswith(own):
            files.setdefault(path[len(own) :], []).append(value)
        else:
            files["proc"].append(line)
    if "meta" not in files or not files["proc"]:
        raise ValueError("a node snapshot without its process table")
    snap = Snapshot()
    for line in files["meta"]:
        word, _, rest = line.partition(" ")
        if word == "host":
            snap.host = rest.split(".", 1)[0]
        elif word == "nvidia":
            snap.nvidia = rest == "1"
        elif word == "timeout":
            snap.timeout = rest
        elif word == "self":
            snap.own = {int(p) for p in rest.split() if p.isdigit()}
        elif word == "maps":
            snap.maps_read = {int(p.partition("/")[0]) for p in rest.split() if p.partition("/")[0].isdigit()}
        elif word == "dumped" and rest.isdigit():
            snap.dumped.add(int(rest))
        elif word == "timedout" and rest.isdigit():
            snap.timed_out.add(int(rest))
    environs: dict[int, list[str]] = {}
    for pid, value in _pid_records(files.get("env", []), "environ"):
        environs.setdefault(pid, []).append(value)
    snap.environs = {pid: "\0".join(values).encode() for pid, values in environs.items()}
    for pid, kind, value in _proc_records(files["proc"]):
        if kind == "cmdline":
            snap.cmdlines.setdefault(pid, []).append(value)
        elif kind == "stat":
            parsed = _stat_line(value)
            if parsed is not None and parsed[0] == pid:
                snap.stats[pid] = parsed[1]
        elif kind == "status":
            name, _, rest = value.partition(":")
            numbers = [int(v) for v in rest.split() if v.isdigit()]
            if name == "Uid" and len(numbers) > 1:
                snap.uids[pid] = numbers[1]  # the effective uid: the owner of /proc/PID
            elif name == "NSpid":
                snap.ns_pids[pid] = numbers
    for line in files.get("maps", []):
        number = line.partition("/")[0]
        if number.isdigit():
            snap.mapped.add(int(number))
    for name, lines in files.items():
        if name.startswith("dump.") and name[5:].isdigit():
            snap.dumps[int(name[5:])] = "\n".join(lines).encode()
    return snap


class SnapshotEntry(ProcfsEntry):
    """A process as the node's snapshot shows it; what the snapshot lacks raises :class:`NeedsNode`."""

    __slots__ = ("_snap",)

    def __init__(self, pid: int, snap: Snapshot) -> None:
        comm, state, ppid, _ = snap.stats[pid]
        super().__init__(pid, comm, state, ppid)
        self._snap = snap
        self._cmdline = snap.cmdlines.get(pid, [])
        self._environ_raw = snap.environs.get(pid, b"")
        self._known.add("environ")

    @property
    def exe(self) -> str:
        raise NeedsNode(f"pid {self.pid}'s executable")

    @property
    def uid(self) -> Optional[int]:
        if self.pid not in self._snap.uids:
            raise NeedsNode(f"pid {self.pid}'s owner")
        return self._snap.uids[self.pid]

    @property
    def is_python(self) -> Optional[bool]:
        if self.comm.startswith(procfs.PYTHON_NAMES):
            return True
        if self.cmdline and self.cmdline[0].rsplit("/", 1)[-1].startswith(procfs.PYTHON_NAMES):
            return True
        if self.pid in self._snap.mapped:
            return True
        if self.pid in self._snap.maps_read:
            return False
        raise NeedsNode(f"whether pid {self.pid} is Python")


class SnapshotTable(ProcessTable):
    """The node's process table from its snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__({pid: SnapshotEntry(pid, snap) for pid in snap.stats}, set(snap.own))
        self.snap = snap

    def maps_any(self, pid: int, marks: tuple[bytes, ...]) -> Optional[bool]:
        raise NeedsNode(f"pid {pid}'s libraries")

    def start_ticks(self, pid: int) -> int:
        return self.snap.stats[pid][3] if pid in self.snap.stats else 0

    def ns_pids(self, pid: int) -> list[int]:
        if pid not in self.snap.uids:
            raise NeedsNode(f"pid {pid}'s namespaces")
        return self.snap.ns_pids.get(pid, [])


@dataclass
class ShellSource:
    """A node's snapshot as a :class:`rankscope.stacks.local.NodeSource`."""

    snap: Snapshot
    host: str = ""
    table: ProcessTable = field(init=False)
    nvidia: bool = False

    def __post_init__(self) -> None:
        self.host = self.snap.host
        self.nvidia = self.snap.nvidia
        self.table = SnapshotTable(self.snap)

    def dump(self, targets: list[Target]) -> list[DumpOutcome]:
        from rankscope.stacks.pyspy import parse_dump

        outcomes = []
        intern: dict[Any, Any] = {}
        for target in targets:
            state = self.snap.stats[target.pid][1] if target.pid in self.snap.stats else "?"
            outcome = DumpOutcome(target, state_before=state)
            if target.pid in self.snap.timed_out:
                outcome.failure = target.failure(
                    Stage.DUMP,
                    f"py-spy did not finish within {self.snap.timeout}s",
                    "raise --timeout (a process under heavy load or --native symbol loading is slow)",
                    FailureKind.TIMED_OUT,
                )
            elif target.pid not in self.snap.dumped or target.pid not in self.snap.dumps:
                raise NeedsNode(f"pid {target.pid} was not dumped there")
            else:
                outcome.raw = self.snap.dumps[target.pid]
                try:
                    threads = parse_dump(outcome.raw, target.pid, intern)
                except ValueError as exc:
                    raise NeedsNode(f"pid {target.pid}'s dump: {exc}") from exc
                outcome.snapshot = ProcessSnapshot(
                    pid=target.pid, rank=target.rank, threads=threads, cmdline=target.cmdline
                )
            outcomes.append(outcome)
        return outcomes


def node_run(stdout: str, options: StacksOptions) -> LocalResult:
    """The raw run that node's own rankscope would have made, over its snapshot; NeedsNode where the
    snapshot cannot say (ValueError: not a snapshot)."""
    source = ShellSource(parse(stdout))
    try:
        result = run_local(options, raw=True, source=source)
    except NeedsFullRun as exc:
        raise NeedsNode("a rank waits for its GPU") from exc
    report = result.report
    if not report.jobs and not report.processes:
        raise NeedsNode("no job found in the snapshot")
    return result


def node_answer(stdout: str, options: StacksOptions) -> dict[str, Any]:
    """The ``rankscope.stacks.node/1`` document that node's own rankscope would have sent."""
    return node_document(node_run(stdout, options))


def node_report(result: LocalResult) -> StacksReport:
    """The report the head reads from that node's raw answer (rankscope.cluster.node_answer), its groups
    derived from the dumps, without the document in between. ``result.report`` becomes it."""
    samples = result.report.samples
    dumps = {raw_name(o, sample, samples): o.raw for sample, o in result.outcomes if o.snapshot is not None}
    report, _bad = from_dumps(result.report, dumps, dumps.__getitem__, "dump ")
    return report

"""Deaths of ranks the watcher cannot see: on another node, reported in the job's output files.

The watcher sees its own node's workers exit (their pidfds). A rank on another node is seen only
through what the launcher gathers into the job's output (srun, mpirun and a SLURM batch script
write every node's lines into one file on the first node). At each look :class:`OutputReader`
reads the bytes written since the last look (at most :data:`READ_MAX` per file: the cost follows
the job's own output, nothing else) and passes them to the recognisers of `rankscope logs`:

- a Python traceback of a rank-prefixed line (``srun --label``, torchrun ``--tee``, torch's own
  ``[rankN]:`` marker on an uncaught exception), once its exception line is read
  (:class:`rankscope.logs.tracebacks.TracebackCollector`);
- a launcher reporting a rank's end: torchrun's ``failed (exitcode: N) local_rank: ...``, srun's
  ``error: HOST: task N: Exited with exit code N``, mpirun's ``exited on signal``, DeepSpeed's
  ``exits with return code`` (:class:`rankscope.logs.line_evidence.LineEvidence`), an Open MPI
  native crash report, torchrun's ``Failures:`` summary
  (:func:`rankscope.logs.torchrun_summary.find_summaries`);
- mpirun's "exited with non-zero status ... Process name: [[J,S],R] / Exit code: N" block (the one
  pattern here: `logs` weighs that case from the rank's own lines).

:class:`Elsewhere` turns what they report into one ``death`` trigger per generation of this node's
workers: a rank of this node is the pidfds' to report (its lines are left out by rank; a death
they already reported disarms it), and the rank that failed first is the one that matters.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from rankscope.evidence import Kind
from rankscope.logs.labels import host_and_rank, label_text
from rankscope.logs.line_evidence import LineEvidence
from rankscope.logs.prefixes import PLAIN, SourceLabels, sniff_dialect, sniff_srun, tally_lines
from rankscope.logs.redraws import split_redraws
from rankscope.logs.torchrun_summary import find_summaries
from rankscope.logs.tracebacks import RankTraceback, TracebackCollector
from rankscope.watch.model import Reason, Snapshot, Trigger

#: New bytes read from one output file at one look, at most (a job that writes more between two
#: looks is read from its latest bytes: the lines in between are not searched).
READ_MAX = 1 << 20
#: An unfinished last line kept for the next look, at most.
LINE_MAX = 64 << 10
#: Lines read before the file's prefix form (srun --label, a dialect) is settled.
SNIFF_LINES = 20
#: The watcher's own lines in a shared stderr file are not the job's.
OWN_LINE = b"rankscope watch:"
#: mpirun's report of the first process that exited non-zero (Open MPI 4 and PRRTE's prterun).
_MPIRUN_FIRST = re.compile(
    rb"exited with non-zero status, thus causing\s+the job to be terminated\. The first process to do so was:"
    rb"\s+Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(-?\d+)"
)
#: What the launcher or the scheduler does to stop a rank: not a failure of it.
_STOPPED = ("SignalException", "got signal: 15")
_DEATH_KINDS = (Kind.LAUNCHER, Kind.LAUNCHER_SUMMARY, Kind.NATIVE_CRASH)


@dataclass(frozen=True)
class ReportedDeath:
    """A rank's failure as the output reports it."""

    #: What names it, for telling one report from another ("rank 3", "torchrun: local rank 1 ...").
    key: str
    #: Its global rank when the report names one.
    rank: Optional[int]
    text: str
    path: str


@dataclass
class _File:
    """One output file, read from where the last look stopped."""

    path: str
    offset: int
    partial: bytes = b""
    labels: SourceLabels = PLAIN
    lines: int = 0
    collector: TracebackCollector = field(default_factory=TracebackCollector)
    evidence: LineEvidence = field(default_factory=LineEvidence)
    #: Launcher findings already turned into reports.
    findings_seen: int = 0
    #: Tracebacks the collector closed since the last look.
    closed: list[RankTraceback] = field(default_factory=list)
    #: Bytes not searched (more was written between two looks than READ_MAX).
    skipped: int = 0

    def __post_init__(self) -> None:
        self._start(self.labels)

    def restart(self) -> None:
        """Forget the tracebacks being read (the bytes they were in are skipped)."""
        self._start(self.labels)

    def _start(self, labels: SourceLabels) -> None:
        self.labels = labels
        self.collector = TracebackCollector(sink=self._closed)
        self.collector.start_source(self.path, labels)
        self.evidence = LineEvidence()
        self.evidence.start_source(self.path, labels)
        self.findings_seen = 0
        self.closed: list[RankTraceback] = []

    def _closed(self, tb: RankTraceback) -> None:
        self.closed.append(tb)

    def read(self, size: int) -> list[ReportedDeath]:
        if size < self.offset:  # truncated or replaced: read it from its start
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return []
        start = max(self.offset, size - READ_MAX)
        if start > self.offset:
            self.skipped += start - self.offset
            self.partial = b""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return []
        try:
            data = os.pread(fd, size - start, start)
        except OSError:
            return []
        finally:
            os.close(fd)
        self.offset = start + len(data)
        data = self.partial + data
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:] if len(data) - cut <= LINE_MAX else b""
        return self._feed(data[:cut])

    def _feed(self, chunk: bytes) -> list[ReportedDeath]:
        if not chunk:
            return []
        chunk = split_redraws(chunk)  # a progress bar's redraws: a rank's traceback may follow one
        if OWN_LINE in chunk:
            chunk = b"".join(
                line for line in chunk.splitlines(keepends=True) if not line.startswith(OWN_LINE)
            )
        if self.lines < SNIFF_LINES:
            srun = sniff_srun(chunk)
            labels = SourceLabels(allow_srun=srun, dialect=None if srun else sniff_dialect(chunk))
            if labels != self.labels:
                self._start(labels)
        tally = tally_lines(chunk, self.labels)
        self.lines += tally.newlines
        self.collector.feed(chunk, tally.newlines, tally.unlabelled)
        self.evidence.feed(chunk, tally.newlines, tally.unlabelled)
        found = [d for d in (self._of_traceback(tb) for tb in self._tracebacks()) if d is not None]
        new = self.evidence.findings_[self.findings_seen :]
        self.findings_seen = len(self.evidence.findings_)
        for finding in new:
            if finding.kind in _DEATH_KINDS and finding.cause != "sigterm":
                # mpirun names the MPI rank; torchrun and DeepSpeed a local rank, srun a task (a
                # node's launcher under `srun torchrun`): not a global rank, never taken for one
                # of this node's ranks
                rank = int(finding.who) if finding.who and finding.who.isdigit() else None
                rank = rank if finding.what.startswith("mpirun:") else None
                found.append(ReportedDeath(finding.what, rank, finding.what, self.path))
        if b"Failures:" in chunk or b"Root Cause (first" in chunk:
            for entry in find_summaries(chunk):
                if entry.exitcode == 0 or (entry.exitcode == -15 and not entry.root_cause):
                    continue
                text = f"torchrun: rank {entry.rank} on {entry.host} failed ({entry.how})"
                found.append(ReportedDeath(f"rank {entry.rank}", entry.rank, text, self.path))
        if b"non-zero status" in chunk:
            for match in _MPIRUN_FIRST.finditer(chunk):
                rank, code = int(match.group(1)), int(match.group(2))
                found.append(
                    ReportedDeath(
                        f"rank {rank}", rank, f"mpirun: rank {rank} exited with code {code}", self.path
                    )
                )
        return found

    def _tracebacks(self) -> list[RankTraceback]:
        closed, self.closed = self.closed, []
        return [*closed, *self.collector.completed_open()]

    def _of_traceback(self, tb: RankTraceback) -> Optional[ReportedDeath]:
        if tb.label is None and tb.global_rank is None:
            return None  # a line without a rank: the launcher's own, or anyone's
        if tb.handled or tb.logged or not tb.exception or any(word in tb.exception for word in _STOPPED):
            return None  # caught (logged, or the rank wrote on), or the rank was told to stop
        rank = tb.global_rank if tb.global_rank is not None else host_and_rank(tb.label or b"")[1]
        who = f"rank {rank}" if rank is not None else str(label_text(tb.label))
        return ReportedDeath(who, rank, f"{who}: {tb.exception[:200]}", self.path)


@dataclass
class OutputReader:
    """The job's output files, each read from where the last look stopped; what is in a file when
    it is first seen is not news (an attached watcher starts at its end)."""

    files: dict[str, _File] = field(default_factory=dict)

    def skip_to(self, sizes: dict[str, int]) -> None:
        """Read the files from these sizes on (what came before is not searched)."""
        for path, size in sizes.items():
            known = self.files.get(path)
            if known is None:
                self.files[path] = _File(path, size)
            elif size > known.offset:
                known.offset, known.partial = size, b""
                known.restart()

    def read(self, outputs: tuple[tuple[str, int, float], ...]) -> list[ReportedDeath]:
        found: list[ReportedDeath] = []
        for path, size, _mtime in outputs:
            known = self.files.get(path)
            if known is None:
                self.files[path] = _File(path, size)
                continue
            with contextlib.suppress(OSError):
                found += known.read(size)
        return found


@dataclass
class Elsewhere:
    """One ``death`` trigger per generation of this node's workers, from what the output reports."""

    reader: OutputReader = field(default_factory=OutputReader)
    armed: bool = True
    reported: set[str] = field(default_factory=set)

    def restarted(self, sizes: dict[str, int]) -> None:
        """A new generation of workers (an elastic restart): a failure of it is news again; the
        output up to ``sizes`` is the earlier attempt's (its launcher's lines about the failure)."""
        self.armed = True
        self.reported.clear()
        self.reader.skip_to(sizes)

    def look(self, snap: Snapshot, local_ranks: set[int], triggers: list[Trigger]) -> list[Trigger]:
        """The output read since the last look (always, so that it is never read twice); a trigger
        when it reports a rank that is not this node's, while ranks of this node still run."""
        found = self.reader.read(snap.outputs)
        if any(t.reason == Reason.DEATH for t in triggers):
            self.armed = False  # this node's own death: its capture is the one for this failure
        found = [
            d for d in found if d.key not in self.reported and (d.rank is None or d.rank not in local_ranks)
        ]
        self.reported.update(d.key for d in found)
        if not found or not self.armed or not snap.ranks:
            return []
        self.armed = False
        ranks = tuple(sorted({d.rank for d in found if d.rank is not None}))
        words = "; ".join(dict.fromkeys(d.text for d in found))
        files = ", ".join(dict.fromkeys(os.path.basename(d.path) for d in found))
        alive = len(snap.ranks)
        here = "a rank here still ran" if alive == 1 else f"{alive} ranks here still ran"
        return [Trigger(Reason.DEATH, f"the job's output ({files}) reports {words} while {here}", ranks)]

"""What NCCL_DEBUG=INFO output says: version, network, channels per process, and known failures.

Lines are read by :mod:`rankscope.logs.nccl_lines`; the known failures, each with its cause and
fix, are the rules of :mod:`rankscope.logs.nccl_rules`. NCCL lines may sit behind a launcher's
rank prefix. A process is keyed by its rank prefix when there is one, else by ``host:pid``;
``comm ... rank R nranks N`` lines tell the NCCL rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Optional

from rankscope.errors import ErrorReport
from rankscope.logs.collective_trace import HEADER as STACK_HEADER
from rankscope.logs.collective_trace import CollectiveTraces, Place
from rankscope.logs.labels import host_and_rank, label_text
from rankscope.logs.nccl_host import HostFacts
from rankscope.logs.nccl_lines import INFO_SIGNALS, LINE, SIGNALS, NcclEvidence, NcclProcess, Signal
from rankscope.logs.nccl_rules import (
    IB_STATUS,
    NUMBERS,
    Hit,
    NcclFinding,
    duplicate_gpu_findings,
    finding,
    interface_findings,
    message_findings,
    network_findings,
)
from rankscope.logs.prefixes import PLAIN, SourceLabels, split_line
from rankscope.logs.sources import ReadSummary
from rankscope.serial import OMIT_NONE

if TYPE_CHECKING:
    from rankscope.logs.reading import Reading

__all__ = ["IB_STATUS", "NcclDocument", "NcclFinding", "NcclProcess", "NcclScan", "render_nccl"]

#: Lines worth reading contain NCCL (NCCL's own, torch's WorkNCCL/ProcessGroupNCCL) or gloo's interface
#: error. Two ``find`` loops: a regex alternation of the two is 10x slower (1.6 s against 0.16 s on 124 MB).
_GLOO = b"Unable to find address for"


@dataclass
class NcclDocument:
    """``rankscope.logs.nccl``: every process with NCCL output, and the findings."""

    SCHEMA: ClassVar[str] = "rankscope.logs.nccl/1"

    nccl_lines: int
    ranks: list[NcclProcess]
    findings: list[NcclFinding]
    read: ReadSummary = field(default_factory=ReadSummary)
    #: The error the verb ends with, when it printed what it found and still failed.
    error: Optional[ErrorReport] = field(default=None, metadata=OMIT_NONE)


@dataclass
class _Warn:
    hits: list[Hit] = field(default_factory=list)
    count: int = 0


class NcclScan:
    """Feed chunks of whole lines (with the source's name, for file:line), then take :meth:`result`."""

    def __init__(self) -> None:
        self.processes: dict[str, NcclProcess] = {}
        self.hits: dict[str, list[Hit]] = {}
        self.warns: dict[str, _Warn] = {}
        self.nccl_lines = 0
        self._source = ""
        self._line_no = 0  # lines of the current source before the current chunk
        #: The user's frame of each rank's timed-out collective (torch's stack of it), by label.
        self.traces = CollectiveTraces()
        self._offset = 0  # bytes fed before the current chunk, every source: the stacks' order

    def feed(self, chunk: bytes, labels: SourceLabels = PLAIN, source: str = "") -> None:
        if source != self._source:
            self.traces.end()
            self._source, self._line_no = source, 0
        if self.traces.reading or STACK_HEADER in chunk:
            base = self._offset

            def head(line: bytes) -> tuple[Optional[str], bytes]:
                split = split_line(line, labels.allow_srun, labels.dialect)
                return label_text(labels.label(split.label)), split.raw_prefix

            self.traces.feed(chunk, head, lambda start: base + start)
        self._offset += len(chunk)
        counted = 0  # newlines before this chunk offset are counted in line_no
        line_no = self._line_no
        pos = chunk.find(b"NCCL")
        while pos >= 0:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            line_no += chunk.count(b"\n", counted, start)
            counted = start
            self._line(chunk[start:end], labels, line_no + 1)
            pos = chunk.find(b"NCCL", end)
        pos = chunk.find(_GLOO)
        while pos >= 0:  # gloo's own interface error: rare, so its line number is counted from the start
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            if b"NCCL" not in chunk[start:end]:
                self._line(chunk[start:end], labels, self._line_no + chunk.count(b"\n", 0, start) + 1)
            pos = chunk.find(_GLOO, end)
        self._line_no = line_no + chunk.count(b"\n", counted)

    def _line(self, line: bytes, labels: SourceLabels, line_no: int) -> None:
        split = split_line(line, labels.allow_srun, labels.dialect)
        label = labels.label(split.label)
        match = LINE.search(split.text)
        if match is None:  # torch's or gloo's line, not NCCL's own
            text = split.text.decode("utf-8", "replace").rstrip("\r")
            self._signals(SIGNALS, text, split.text, label, None, line_no)
            return
        self.nccl_lines += 1
        proc = self._process(match, label)
        msg = match.group("msg").decode("utf-8", "replace").rstrip("\r")
        if match.group("level") in (b"WARN", b"ABORT"):
            proc.warnings += 1
            if not self._signals(SIGNALS, msg, split.text, label, proc, line_no):
                entry = self.warns.setdefault(NUMBERS.sub("<n>", msg), _Warn())
                entry.count += 1
                entry.hits.append(
                    Hit(proc.who, proc.host, proc.rank, (), self._evidence(split.text, line_no), proc)
                )
            return
        fact = proc.read_info(msg)
        if fact is not None and fact not in proc.facts_at:
            proc.facts_at[fact] = self._evidence(split.text, line_no)
        if not msg.startswith("Channel "):  # most INFO lines; none is a signal
            self._signals(INFO_SIGNALS, msg, split.text, label, proc, line_no)

    def _process(self, match: re.Match[bytes], label: Optional[bytes]) -> NcclProcess:
        host = match.group("host").decode("utf-8", "replace")
        pid = int(match.group("pid"))
        key = label.decode("utf-8", "replace") if label is not None else f"{host}:{pid}"
        proc = self.processes.get(key)
        if proc is None:
            proc = self.processes[key] = NcclProcess("", host, pid, label=label)
            proc.update_who()
        return proc

    def _signals(
        self,
        signals: tuple[Signal, ...],
        text: str,
        line: bytes,
        label: Optional[bytes],
        proc: Optional[NcclProcess],
        line_no: int,
    ) -> bool:
        """Record every signal ``text`` matches (with ``line`` as evidence); True when one did."""
        claimed = False
        for signal in signals:
            found = signal.search(text)
            if found is None:
                continue
            claimed = True
            evidence = self._evidence(line, line_no)
            if proc is not None:
                hit = Hit(proc.who, proc.host, proc.rank, found.groups(), evidence, proc)
            else:
                host, rank = host_and_rank(label) if label is not None else (None, None)
                hit = Hit(label_text(label) or "-", host, rank, found.groups(), evidence, None)
            self.hits.setdefault(signal.name, []).append(hit)
        return claimed

    def _evidence(self, line: bytes, line_no: int) -> NcclEvidence:
        text = line.decode("utf-8", "replace").rstrip("\r")
        return NcclEvidence(f"{self._source or '-'}:{line_no}", text[:300])

    def read(self, reading: Reading) -> NcclScan:
        """Every line of ``reading`` looked at, with its file's name."""
        for opened in reading.sources():
            for chunk in opened.chunks:
                self.feed(chunk, opened.labels, opened.source.name)
        return self

    def result(self, host: Optional[HostFacts] = None) -> NcclDocument:
        """The document; ``host`` (this host's facts) names the interfaces that exist when the log ran here."""
        ordered = sorted(
            self.processes.items(),
            key=lambda item: (item[1].rank if item[1].rank is not None else 1 << 30, item[0]),
        )
        procs = [proc for _key, proc in ordered]
        self._late_ranks()
        findings = [
            *duplicate_gpu_findings(self.hits, procs),
            *interface_findings(self.hits, procs, host),
            *message_findings(self.hits),
            *network_findings(procs, host),
        ]
        for text, entry in sorted(self.warns.items(), key=lambda item: -item[1].count):
            findings.append(finding("warn", f"NCCL WARN ({entry.count}x): {text}", entry.hits))
        self._called_from(findings)
        return NcclDocument(self.nccl_lines, procs, findings)

    def _called_from(self, findings: list[NcclFinding]) -> None:
        """A watchdog timeout's message ends with the user's frames its collectives were called
        from, where torch printed their stacks (each distinct frame once, in the log's order)."""
        self.traces.end()
        places = self.traces.places
        if not places:
            return
        for found in findings:
            if found.kind != "watchdog_timeout":
                continue
            whos = [None if who == "-" else who for who in found.who] or [None]
            known = sorted(
                (p for p in (places.get(who) for who in {*whos, None}) if p is not None), key=_order
            )
            words = list(dict.fromkeys(p.words() for p in known))
            if words:
                found.message += f" (called from {'; '.join(words)})"

    def _late_ranks(self) -> None:
        """A hit read before its process's rank was known gets the rank and name known now."""
        for hits in [*self.hits.values(), *(w.hits for w in self.warns.values())]:
            for hit in hits:
                if hit.proc is not None:
                    hit.who, hit.rank = hit.proc.who, hit.proc.rank


def _order(place: Place) -> int:
    return place.order


def render_nccl(result: NcclDocument, notes: list[str]) -> str:
    out = [f"{len(result.ranks)} process(es) with NCCL output ({result.nccl_lines} NCCL lines)"]
    if result.ranks:
        rows = [("who", "rank", "NCCL", "network", "interface", "channels", "transports", "GPU", "init")]
        for p in result.ranks:
            rows.append(
                (
                    p.who,
                    f"{p.rank}/{p.nranks}" if p.rank is not None else "?",
                    p.version or "?",
                    _network(p),
                    p.interface or "-",
                    str(p.channels) if p.channels is not None else "-",
                    ", ".join(f"{k}x{v}" for k, v in sorted(p.transports.items())) or "-",
                    f"cuda:{p.cuda_dev} bus {p.bus_id}" if p.bus_id is not None else "-",
                    (p.init or "-") + (f"  WARN x{p.warnings}" if p.warnings else ""),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            out.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    if result.findings:
        out.append("")
        out.append(f"{len(result.findings)} finding(s):")
        for index, f in enumerate(result.findings, 1):
            out.append(f"[{index}] {f.kind}: {f.message}")
            if f.who:
                out.append(f"    where: {', '.join(f.who[:16])}" + (" ..." if len(f.who) > 16 else ""))
            if f.cause:
                out.append(f"    cause: {f.cause}")
            out.append(f"    fix:   {f.next_step}")
            if f.evidence:
                out.append(f"    lines: {', '.join(e.at for e in f.evidence)}")
                out.append(f"    e.g.:  {f.evidence[0].line[:200]}")
    else:
        out.append("no findings: no warnings, one network, same interface and version everywhere")
    out.extend(f"note: {n}" for n in notes)
    return "\n".join(out)


def _network(p: NcclProcess) -> str:
    if p.network != "IB":
        return p.network or "?"
    links = p.ib_links if len(p.ib_links) == len(p.ib_devices) else [""] * len(p.ib_devices)
    devices = ",".join(f"{d}/{link}" if link else d for d, link in zip(p.ib_devices, links))
    return f"IB {devices}" if devices else "IB"

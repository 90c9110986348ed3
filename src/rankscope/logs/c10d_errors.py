"""torch.distributed errors whose message names their cause (pure): a collective mismatch found by
``TORCH_DISTRIBUTED_DEBUG=DETAIL``, a rendezvous store whose port is taken, DDP parameters that got
no gradient.

Each of them is raised as a plain ``RuntimeError`` (``DistNetworkError``) on whichever rank noticed
it, so the traceback alone would blame the rank that printed first. Their lines are read wherever
they are (a rank's traceback, a bare exception line, torchrun's ``traceback :`` summary block, a
framework's logger line) and turned into one finding per failure, which takes the place of the
plain ``python_exception`` findings of the same messages (:func:`specific_findings`). A line without
a rank prefix inside an entry of torchrun's failure summary is that entry's ``rank :``.

The messages, in the forms torch has printed them (``ProcessGroupWrapper.cpp``, ``socket.cpp``,
``reducer.cpp``)::

    Detected mismatch between collectives on ranks. Rank 1 is running collective:
        CollectiveFingerPrint(SequenceNumber=7, OpType=ALLREDUCE, TensorShape=[4, 5], TensorDtypes=Float,
        TensorDeviceTypes=TensorOptions(...)), but Rank 2 is running collective:
        CollectiveFingerPrint(SequenceNumber=7, OpType=BROADCAST, ...).Collectives differ in ...
    ... Rank 3 is running inconsistent collective: CollectiveFingerPrint(OpType=BARRIER)    (torch 1.10-1.11)
    ..., but Rank 1 is running collective: REDUCE.                                          (torch 1.12)
    The server socket has failed to listen on any local network address. port: 29500, useIpv6: false,
        code: -98, name: EADDRINUSE, message: address already in use
    The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). ...
    RuntimeError: Address already in use                                                    (torch 1.x)
    Expected to have finished reduction in the prior iteration before starting a new one. ...
    Parameters which did not receive grad for rank 1: head.bias, head.weight
    Parameter indices which did not receive grad for rank 1: 4 5
    DDP expects same model across all ranks, but Rank 5 has 8 params, while rank 0 has inconsistent 0 params.

The first rank of a mismatch message is the rank that printed it, with its own collective; the
second is another rank as the printer saw it, and torch's copy of that one can be garbled
(``SequenceNumber=0OpType=GATHER`` for a rank that ran a broadcast, seen with torch 2.13 on gloo), so
a rank's own report is always preferred to what others say it runs.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Optional

from rankscope.evidence import CULPRIT, Finding, Kind
from rankscope.folding import RankSet
from rankscope.logs import join_errors
from rankscope.logs.join_errors import Heard, JoinLines

DESYNC = "collective_desync"
PORT_IN_USE = "port_in_use"
DDP_UNUSED = "ddp_unused_parameters"
DDP_MODEL = "ddp_model_mismatch"

#: Words every line of one of these failures holds: what :class:`C10dLines` is fed.
NEEDLES = (
    b"(local_rank: ",  # first: a block's summary entries are known before the messages in them
    b"between collectives",
    b"already in use",
    b"failed to listen",
    b"finished reduction",
    b"did not receive grad",
    b"same model across all ranks",
    *join_errors.WORDS,
)
#: What the exception line of each of these failures holds (a block is searched for NEEDLES only after one).
WORDS = NEEDLES[1:]
#: torchrun's failure summary names the rank of the entry whose ``traceback :`` follows.
_SUMMARY_RANK = re.compile(r"^rank\s*: (\d+) \(local_rank: \d+\)")
#: How far (lines) an entry's traceback runs after its ``rank :`` line.
SUMMARY_REACH = 400
SUMMARY_KEPT = 4096

_MISMATCH = re.compile(r"Detected mismatch between collectives on ranks")
_OWN = re.compile(r"Rank (\d+) is running (?:inconsistent )?collective: ?(.*?)(?:, but Rank |$)")
_OTHER = re.compile(r", but Rank (\d+) is running collective: ?(.*?)(?:\.? ?Collectives differ|$)")
_SEQ = re.compile(r"SequenceNumber=(\d+)")
_OP = re.compile(r"OpType=(\w+)")
_SHAPE = re.compile(r"TensorShape=(\[[^\]]*\]?)")
_DTYPES = re.compile(r"TensorDtypes=(\w+)")
_BARE_OP = re.compile(r"^([A-Z_]+)\.?$")

_PORT = re.compile(r"port: (\d+)|\]:(\d+) \(errno|\b\d{1,3}(?:\.\d{1,3}){3}:(\d+) \(errno|:(\d+)\): address")
#: torch's store: its own wording, or torch 1.x's bare ``RuntimeError: Address already in use`` (a
#: Python ``OSError: [Errno 98]`` is some other server of the program: a dashboard, an API).
_PORT_LINE = re.compile(
    r"failed to listen|failed to bind|EADDRINUSE|(?:RuntimeError|DistNetworkError|DistStoreError): Address already in use"
)

_REDUCTION = "Expected to have finished reduction in the prior iteration"
_UNUSED = re.compile(r"Parameter(s| indices) which did not receive grad for rank (\d+): ?(.*)")
#: DDP's check of the model when it wraps it (``verify_params_across_processes``): a rank whose parameter
#: count differs from another's names both.
_MODEL = re.compile(
    r"DDP expects same model across all ranks, but Rank (\d+) has (\d+) params, while rank (\d+) has "
    r"inconsistent (\d+) params"
)

#: Lines kept that name no rank (a mismatch message cut before it, port lines).
KEPT = 64
#: Indices and names listed in a finding; the rest are counted.
LISTED = 8

DESYNC_STEP = (
    "make every rank call the same collectives in the same order with the same shapes: a collective "
    "inside a condition that differs between ranks (rank == 0, a data-dependent branch, an early "
    "exit), or tensors sized by each rank's own data; compare {where} with the other ranks' "
    "call of it (`rankscope stacks` while it hangs, `rankscope fr` for the flight recorders)"
)
PORT_STEP = (
    "another job, or a process left over from an earlier run, holds port {port} on that host "
    "(`ss -ltnp 'sport = :{port}'` names it): stop the leftover, or pick a free port "
    "(torchrun --master-port, --rdzv-endpoint HOST:PORT; MASTER_PORT for init_process_group)"
)
DDP_STEP = (
    "pass find_unused_parameters=True to DistributedDataParallel (it costs a pass over the graph "
    "each step), or make every parameter take part in the loss: a branch of forward not taken, an "
    "output left out of the loss, layers meant to be frozen still requiring grad"
)
DDP_NAMES = "; TORCH_DISTRIBUTED_DEBUG=INFO names the parameters"
DDP_MODEL_STEP = (
    "build the model the same way on every rank before DistributedDataParallel wraps it: a branch on the "
    "rank, a config or checkpoint read on some ranks only, modules created lazily or after the wrap, "
    "parameters frozen or deleted on one rank; print sum(1 for _ in model.parameters()) on each rank"
)


@dataclass(frozen=True)
class Fingerprint:
    """What one rank runs, as far as its message says (a cut message says less)."""

    seq: Optional[str] = None
    op: Optional[str] = None
    shape: Optional[str] = None
    dtypes: Optional[str] = None

    def fields(self) -> tuple[Optional[str], ...]:
        return (self.seq, self.op, self.shape, self.dtypes)

    def known(self) -> int:
        return sum(value is not None for value in self.fields())

    def agrees(self, other: Fingerprint) -> bool:
        """Equal in every field both of them name."""
        return all(a is None or b is None or a == b for a, b in zip(self.fields(), other.fields()))

    def phrase(self) -> str:
        """``ALLREDUCE (sequence number 7, shape [4, 5])``."""
        extra = [f"sequence number {self.seq}"] if self.seq is not None else []
        extra += [f"shape {self.shape}"] if self.shape is not None else []
        extra += [f"dtype {self.dtypes}"] if self.dtypes is not None else []
        return (self.op or "a collective") + (f" ({', '.join(extra)})" if extra else "")


def parse_fingerprint(text: str) -> Optional[Fingerprint]:
    """``CollectiveFingerPrint(SequenceNumber=1, OpType=X, TensorShape=[..], ...)``, its forms without
    a comma or cut short, or a bare op name (``REDUCE.``); None when nothing is readable."""
    text = text.strip()
    bare = _BARE_OP.match(text)
    if bare is not None:
        return Fingerprint(op=bare.group(1))
    found = [pattern.search(text) for pattern in (_SEQ, _OP, _SHAPE, _DTYPES)]
    # a field that runs to the end of a cut message may itself be cut (``OpType=ALLREDUC``)
    values = [m.group(1) if m is not None and m.end() < len(text) else None for m in found]
    fingerprint = Fingerprint(*values)
    return fingerprint if fingerprint.known() else None


@dataclass(frozen=True)
class Mismatch:
    """One rank's mismatch message: the rank that printed it and its collective, and another rank as
    the printer saw it."""

    rank: Optional[int]
    own: Optional[Fingerprint]
    other_rank: Optional[int] = None
    other: Optional[Fingerprint] = None


def parse_mismatch(text: str) -> Optional[Mismatch]:
    """The ranks and collectives of ProcessGroupWrapper's message; None for any other text."""
    if _MISMATCH.search(text) is None:
        return None
    own = _OWN.search(text)
    other = _OTHER.search(text)
    return Mismatch(
        int(own.group(1)) if own else None,
        parse_fingerprint(own.group(2)) if own else None,
        int(other.group(1)) if other else None,
        parse_fingerprint(other.group(2)) if other else None,
    )


def port_of(text: str) -> Optional[str]:
    """The port a store's bind failure names (``port: 29500``, ``[::]:29500 (errno: 98``)."""
    found = _PORT.search(text)
    return next((g for g in found.groups() if g), None) if found is not None else None


def classify(text: str) -> Optional[str]:
    """The cause of an exception line that is one of these failures, else None."""
    if _MISMATCH.search(text):
        return DESYNC
    if _REDUCTION in text:
        return DDP_UNUSED
    if _MODEL.search(text):
        return DDP_MODEL
    if "failed to listen" in text or ("already in use" in text.lower() and _PORT_LINE.search(text)):
        return PORT_IN_USE
    return join_errors.classify(text)


@dataclass(frozen=True)
class Seen:
    """A line of one of these failures: who wrote it (its prefix), where."""

    who: Optional[str]
    global_rank: Optional[int]
    source: str
    line: int
    order: int


@dataclass
class C10dLines:
    """The lines of these failures, fed one by one (with the rank prefix already split off)."""

    mismatches: list[tuple[Seen, Mismatch]] = field(default_factory=list)
    ports: list[tuple[Seen, Optional[str]]] = field(default_factory=list)
    reductions: list[Seen] = field(default_factory=list)
    #: rank (as torch's message names it) -> parameter indices, names.
    indices: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    #: The user's frame of each rank's traceback of these failures: (who, global rank) -> FILE:LINE.
    #: Identical tracebacks are grouped under one rank's, so the culprit's own frame is kept here.
    places: dict[tuple[Optional[str], Optional[int]], str] = field(default_factory=dict)
    _reporters: set[int] = field(default_factory=set)
    _unnamed: int = 0
    #: The last ``rank : N (local_rank: M)`` lines of torchrun's summary: where each was, and N.
    _entries: list[tuple[int, int]] = field(default_factory=list)
    _reducers: set[Optional[str]] = field(default_factory=set)
    #: DDP's model check: each rank's parameter count as the messages give it, and the first line.
    params: dict[int, int] = field(default_factory=dict)
    models: list[Seen] = field(default_factory=list)
    #: Ranks that never arrived (rankscope.logs.join_errors).
    joins: JoinLines = field(default_factory=JoinLines)

    def traceback(self, who: Optional[str], global_rank: Optional[int], where: Optional[str]) -> None:
        """A rank's traceback of one of these failures, and its user frame."""
        if where is not None:
            self.places.setdefault((who, global_rank), where)

    def place_of(self, finding: Finding) -> Optional[str]:
        found = self.places.get((finding.who, finding.global_rank))
        if found is None and finding.global_rank is not None:
            found = next((w for (_who, rank), w in self.places.items() if rank == finding.global_rank), None)
        return found

    def feed(self, seen: Seen, text: str) -> None:
        """One line; what is kept is bounded by the ranks (a rank's first message of each kind)."""
        mismatch = parse_mismatch(text)
        if mismatch is not None:
            if mismatch.rank is None:
                self._unnamed += 1  # cut before it names its rank
                if self._unnamed <= KEPT:
                    self.mismatches.append((seen, mismatch))
            elif mismatch.rank not in self._reporters:
                self._reporters.add(mismatch.rank)
                self.mismatches.append((seen, mismatch))
            return
        unused = _UNUSED.search(text)
        if unused is not None:
            rank, listed = int(unused.group(2)), unused.group(3).strip().rstrip(",")
            if listed:
                (self.indices if unused.group(1) == " indices" else self.names).setdefault(rank, listed)
            return
        model = _MODEL.search(text)
        if model is not None:
            if len(self.params) < KEPT * 64:
                self.params.setdefault(int(model.group(1)), int(model.group(2)))
                self.params.setdefault(int(model.group(3)), int(model.group(4)))
            if len(self.models) < KEPT:
                self.models.append(seen)
            return
        summary = _SUMMARY_RANK.match(text)
        if summary is not None and seen.who is None:
            self._entries.append((seen.order, int(summary.group(1))))
            del self._entries[:-SUMMARY_KEPT]
            return
        attempt = join_errors.tried(text)
        if attempt is not None:
            endpoint, errno, words = attempt
            self.joins.tries[endpoint] = (errno, words)
            return
        cause = classify(text)
        if cause is not None and seen.who is None:
            at = bisect.bisect_left(self._entries, (seen.order, -1)) - 1
            if at >= 0 and seen.order - self._entries[at][0] < SUMMARY_REACH:
                rank = self._entries[at][1]  # a line of torchrun's entry for that rank
                seen = replace(seen, who=str(rank), global_rank=rank)
        if cause == DDP_UNUSED and seen.who not in self._reducers:
            self._reducers.add(seen.who)
            self.reductions.append(seen)
        elif cause == PORT_IN_USE and len(self.ports) < KEPT:
            self.ports.append((seen, port_of(text)))
        elif cause is not None:
            join = join_errors.parse(text)
            if join is not None:
                self.joins.feed(Heard(seen.who, seen.global_rank, seen.source, seen.line, seen.order, join))

    def runs_of(self, rank: int) -> Optional[Fingerprint]:
        """The collective a rank runs: as its own message says, else as another rank's says."""
        heard = None
        for _seen, found in self.mismatches:
            if found.rank == rank and found.own is not None:
                return found.own
            if found.other_rank == rank and found.other is not None and heard is None:
                heard = found.other if _reliable(found.other, found.own) else None
        return heard

    def findings(self) -> list[Finding]:
        """One finding per failure found (before the tracebacks of the same messages join it)."""
        out = []
        if self.mismatches:
            out.append(_desync_finding(self.mismatches))
        if self.ports:
            out.append(_port_finding(self.ports))
        if self.reductions:
            out.append(_ddp_finding(self.reductions, self.indices, self.names))
        if self.models:
            out.append(_model_finding(self.models, self.params))
        return out + self.joins.findings(rank for _order, rank in self._entries)


def _first(seen: Iterable[Seen]) -> Seen:
    return min(seen, key=lambda s: s.order)


def _finding(cause: str, first: Seen, what: str, step: str, ranks: Optional[str] = None) -> Finding:
    return Finding(
        Kind.EXCEPTION_LINE,
        cause,
        CULPRIT,
        first.who,
        what,
        None,
        first.source,
        first.line,
        first.order,
        global_rank=first.global_rank,
        ranks=ranks,
        next_step=step,
    )


def _groups(runs: dict[int, Fingerprint]) -> list[tuple[Fingerprint, list[int]]]:
    """Ranks that run the same collective, most ranks first; a cut fingerprint joins the fuller one
    it agrees with."""
    groups: list[tuple[Fingerprint, list[int]]] = []
    for rank, fingerprint in sorted(runs.items(), key=lambda item: (-item[1].known(), item[0])):
        for head, ranks in groups:
            if head.agrees(fingerprint):
                ranks.append(rank)
                break
        else:
            groups.append((fingerprint, [rank]))
    return sorted(groups, key=lambda g: (-len(g[1]), min(g[1])))


def _reliable(other: Fingerprint, own: Optional[Fingerprint]) -> bool:
    """torch's copy of another rank's collective, unless garbled: sequence number 0 and no shape
    where the printer's own collective is at a later one."""
    garbled = other.shape is None and other.seq == "0"
    return not (garbled and own is not None and own.seq not in (None, "0"))


def _desync_finding(mismatches: list[tuple[Seen, Mismatch]]) -> Finding:
    own: dict[int, Fingerprint] = {}
    heard: dict[int, Fingerprint] = {}
    printers: dict[int, Seen] = {}
    named: set[int] = set()
    for seen, found in sorted(mismatches, key=lambda m: m[0].order):
        for rank in (found.rank, found.other_rank):
            if rank is not None:
                named.add(rank)
        if found.rank is not None and found.own is not None:
            own.setdefault(found.rank, found.own)
            if seen.who is not None or found.rank not in printers:
                printers.setdefault(found.rank, seen)
        if found.other_rank is not None and found.other is not None and _reliable(found.other, found.own):
            heard.setdefault(found.other_rank, found.other)
    runs = {**heard, **own}
    groups = _groups(runs)
    first = _first(s for s, _ in mismatches)
    majority = len(runs) >= 3 and len(groups) > 1 and len(groups[0][1]) > len(groups[1][1])
    if majority:
        odd = sorted(rank for _print, ranks in groups[1:] for rank in ranks)
        told = "; ".join(
            f"{RankSet.of(ranks).phrase()} {_runs(ranks)} {p.phrase()}" for p, ranks in groups[1:]
        )
        what = (
            f"collective mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL): {told}, while "
            f"{RankSet.of(groups[0][1]).phrase()} {_runs(groups[0][1])} {groups[0][0].phrase()}"
        )
        culprit = printers.get(odd[0]) if len(odd) == 1 else None
        who = culprit.who if culprit is not None and culprit.who is not None else None
        if who is None and len(odd) == 1:
            who = str(odd[0])
        return replace(
            _finding(DESYNC, first, what, DESYNC_STEP, ranks=str(RankSet.of(odd))),
            who=who,
            global_rank=culprit.global_rank if culprit is not None else None,
            source=(culprit or first).source,
            line=(culprit or first).line,
        )
    told = ", ".join(f"{RankSet.of(ranks).phrase()} {_runs(ranks)} {p.phrase()}" for p, ranks in groups)
    unknown = sorted(named - set(runs))
    if unknown:
        told += (", " if told else "") + f"{RankSet.of(unknown).phrase()} something else"
    what = f"collective mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL) between {RankSet.of(named).phrase()}"
    what += f": {told}" if told else ""
    return replace(
        _finding(DESYNC, first, what, DESYNC_STEP, ranks=str(RankSet.of(named)) if named else None),
        who=None,
        global_rank=None,
    )


def _runs(ranks: list[int]) -> str:
    return "runs" if len(ranks) == 1 else "run"


def _port_finding(ports: list[tuple[Seen, Optional[str]]]) -> Finding:
    first = _first(s for s, _ in ports)
    port = next((p for _s, p in sorted(ports, key=lambda p: p[0].order) if p), None)
    where = f" on {first.who}" if first.who else ""
    what = (
        f"port {port or '(not named: MASTER_PORT, 29500 unless set)'} is already in use{where}: the "
        "rendezvous store (TCPStore, on rank 0 or the launcher's agent) could not listen on it"
    )
    return _finding(PORT_IN_USE, first, what, PORT_STEP.format(port=port or "MASTER_PORT"))


def _listed(text: str, sep: str) -> str:
    items = [item for item in (part.strip() for part in text.split(sep.strip() or None)) if item]
    shown = sep.join(items[:LISTED])
    return shown + (f" ... ({len(items)} in all)" if len(items) > LISTED else "")


def _ddp_finding(reductions: list[Seen], indices: dict[int, str], names: dict[int, str]) -> Finding:
    first = _first(reductions)
    whos = sorted({s.who for s in reductions if s.who is not None})
    ranks = sorted(set(indices) | set(names))
    if ranks:
        about = RankSet.of(ranks).phrase()
    elif whos and all(who.isdigit() for who in whos):
        about = RankSet.of(int(who) for who in whos).phrase()
    else:
        about = ", ".join(whos) or "a rank"
    listed = []
    rank = ranks[0] if ranks else None
    if rank is not None and rank in names:
        listed.append(_listed(names[rank], ", "))
    if rank is not None and rank in indices:
        listed.append(f"indices {_listed(indices[rank], ' ')}")
    params = f": {'; '.join(listed)}" if listed else ""
    what = (
        f"DDP: parameters got no gradient in the last iteration on {about} (not used in producing the "
        f"loss), so the next iteration could not start its reduction{params}"
    )
    step = DDP_STEP + ("" if names else DDP_NAMES)
    folded = str(RankSet.of(ranks)) if ranks else None
    found = _finding(DDP_UNUSED, first, what, step, ranks=folded)
    if first.who is None and len(ranks) == 1:
        found = replace(found, who=str(ranks[0]))  # a line without a prefix: torch's message names the rank
    return found


def _model_finding(models: list[Seen], params: dict[int, int]) -> Finding:
    """The ranks whose model has another number of parameters than most ranks' (all of them, where
    no count is the most common)."""
    first = _first(models)
    by_count: dict[int, list[int]] = {}
    for rank, count in sorted(params.items()):
        by_count.setdefault(count, []).append(rank)
    ranked = sorted(by_count.items(), key=lambda item: -len(item[1]))
    tie = len(ranked) > 1 and len(ranked[0][1]) == len(ranked[1][1])
    odd = sorted(params) if tie else sorted(r for _count, ranks in ranked[1:] for r in ranks)
    said = "; ".join(
        f"{RankSet.of(ranks).phrase()} {'has' if len(ranks) == 1 else 'have'} {count}"
        for count, ranks in sorted(by_count.items(), key=lambda item: item[1][0])
    )
    what = (
        f"DDP: the ranks built different models (parameters: {said}), found when DistributedDataParallel "
        "wrapped it"
    )
    found = _finding(DDP_MODEL, first, what, DDP_MODEL_STEP, ranks=str(RankSet.of(odd)) if odd else None)
    if len(odd) == 1 and not tie:
        found = replace(found, who=str(odd[0]), global_rank=odd[0])  # the odd one, whoever printed it
    return found


#: The plain findings a specific one takes the place of.
_PLAIN = (Kind.TRACEBACK, Kind.EXCEPTION_LINE, Kind.CUT_TRACEBACK)


def specific_findings(findings: list[Finding], lines: C10dLines) -> list[Finding]:
    """``findings`` with the plain ``python_exception`` findings of these failures replaced by one
    finding per failure: it keeps the earliest one's place, time and kind (a traceback is stronger
    evidence than a summary's copy) and the user's frame of the culprit's traceback."""
    specific = lines.findings()
    if not specific:
        return findings
    causes = {f.cause for f in specific}
    plain: dict[str, list[Finding]] = {}
    rest = []
    for finding in findings:
        cause = classify(finding.what) if finding.cause == "python_exception" else None
        if cause in causes and finding.kind in _PLAIN:
            plain.setdefault(cause, []).append(finding)
        else:
            rest.append(finding)
    out = [
        join_errors.absorb(f, plain.get(f.cause, []))
        if f.cause in join_errors.CAUSES
        else _absorb(f, plain.get(f.cause, []), _culprit_runs(f, lines))
        for f in specific
    ]
    return [*rest, *(_own_place(f, lines) for f in out)]


def _own_place(finding: Finding, lines: C10dLines) -> Finding:
    """The culprit's own frame, where its traceback was grouped under another rank's."""
    if finding.cause != DESYNC or finding.who is None:
        return finding
    place = lines.place_of(finding)
    if place is None or place == finding.where:
        return finding
    step = finding.next_step.replace(f"the call at {finding.where}", f"the call at {place}")
    return replace(finding, where=place, next_step=step)


def _culprit_runs(finding: Finding, lines: C10dLines) -> Optional[Fingerprint]:
    if finding.cause != DESYNC or finding.who is None or finding.ranks is None or not finding.ranks.isdigit():
        return None
    return lines.runs_of(int(finding.ranks))


def _absorb(finding: Finding, plain: list[Finding], runs: Optional[Fingerprint] = None) -> Finding:
    if not plain:
        if finding.cause != DESYNC:
            return finding
        return replace(finding, next_step=finding.next_step.format(where="the culprit's collective call"))
    earliest = min(plain, key=lambda f: f.order)
    mine = [f for f in plain if _same_rank(f, finding)]
    if not mine and runs is not None:
        # the culprit's traceback is grouped under another rank's (same frames): the one whose own
        # collective is the culprit's, else one that runs the same op
        mine = [f for f in plain if _own(f) == runs] or [f for f in plain if _own_op(f) == runs.op]
    where = next((f.where for f in sorted(mine, key=lambda f: f.order) if f.where), None)
    if where is None and finding.cause != DESYNC:
        where = next((f.where for f in sorted(plain, key=lambda f: f.order) if f.where), None)
    if where is None and finding.cause == DESYNC and finding.who is None:
        where = earliest.where  # no rank to blame: where the first rank noticed it
    kind = Kind.TRACEBACK if any(f.kind == Kind.TRACEBACK for f in plain) else finding.kind
    step = finding.next_step
    if finding.cause == DESYNC:
        step = step.format(where=f"the call at {where}" if where else "the culprit's collective call")
    # every traceback of it caught (the ranks wrote on): it ended nothing
    role = finding.role if any(f.role == CULPRIT for f in plain) else earliest.role
    return replace(
        finding,
        kind=kind,
        role=role,
        where=where,
        order=min(finding.order, earliest.order),
        time=min((f.time for f in plain if f.time is not None), default=finding.time),
        exception=earliest.exception,
        next_step=step,
    )


def _own(plain: Finding) -> Optional[Fingerprint]:
    found = parse_mismatch(plain.what)
    return found.own if found is not None else None


def _own_op(plain: Finding) -> Optional[str]:
    own = _own(plain)
    return own.op if own is not None else None


def _same_rank(plain: Finding, finding: Finding) -> bool:
    if finding.who is None:
        return False
    if finding.global_rank is not None and plain.global_rank is not None:
        return plain.global_rank == finding.global_rank
    return plain.who == finding.who

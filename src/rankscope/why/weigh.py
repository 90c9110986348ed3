"""Every signal turned into findings of the one evidence model, weighed into a verdict (pure).

Each source gives :class:`rankscope.evidence.Finding` objects (``source`` names where the line
comes from); :func:`rankscope.evidence.decide` picks the root cause by its written precedence; the
other culprits become the weaker hypotheses, strongest kind first. Every rank's state is listed,
merged by equal state as `stacks` merges equal stacks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from rankscope.evidence import CULPRIT, HANDLED, PRECEDENCE, VICTIM, Finding, Kind, culprits, decide
from rankscope.folding import RankSet
from rankscope.logs.analyse import still_running, still_running_words
from rankscope.logs.cuda import short_oom
from rankscope.logs.finished import finished_early, finished_words
from rankscope.logs.line_evidence import ABSENT, CPP_UNCAUGHT
from rankscope.logs.nccl_reason import CITED
from rankscope.model import parse_label
from rankscope.why.findings import all_findings, ended_main, frame_words, rank_word, signal_name
from rankscope.why.report import (
    CAUSE,
    FAILED,
    NO_PROBLEM,
    NOTHING,
    PARTIAL,
    READ,
    VICTIMS_ONLY,
    Evidence,
    Hypothesis,
    RankState,
    WhyReport,
)
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    pass

# ------------------------------------------------------------------------ hypotheses


def _tier(finding: Finding) -> int:
    for index, kinds in enumerate(PRECEDENCE):
        if finding.kind in kinds:
            return index
    return len(PRECEDENCE)


def local_ranks(findings: Sequence[Finding]) -> frozenset[Finding]:
    """The findings whose ``who`` is a launcher's local rank, not a global one (``Finding.local``:
    torchrun's and DeepSpeed's lines, and what `logs errors` named after them: a traceback or C++
    exception without a rank prefix, a faulthandler dump whose death only such a line reports)."""
    return frozenset(f for f in findings if f.local)


def local_words(who: str) -> str:
    """``local rank 1``, ``local rank 3 on worker-1`` (the node its line names)."""
    node, _, number = who.rpartition(":")
    return f"local rank {number} on {node}" if node else f"local rank {number}"


def _ranks_of(finding: Finding) -> list[int]:
    """The global ranks a finding blames: the folded ranks of stacks and recorders, else its rank."""
    folded = finding.source in ("stacks", "flight recorders", "progress markers") or finding.cause in (
        "gpu_ecc",
        "ddp_unused_parameters",  # every rank whose parameters got no gradient: the model's, not one rank's
        # the ranks that never arrived (or could not reach the store), as the waiting ranks' messages name them
        "ranks_never_joined",
        "monitored_barrier",
        "nccl_id_wait",
        "store_unreachable",
    )
    if folded and finding.ranks:
        return list(RankSet.parse(finding.ranks))
    if finding.global_rank is not None:
        return [finding.global_rank]
    if finding.who:
        rank = parse_label(finding.who)[1] if ":" in finding.who else None
        if rank is None and finding.who.isdigit():
            rank = int(finding.who)
        if rank is not None:
            return [rank]
    return []


_WORDS = {
    "python_exception": "raised an exception",
    "mpi_abort": "called MPI_ABORT (Open MPI then killed every process)",
    "sigkill": "was killed by SIGKILL (the OOM killer or the scheduler)",
    "oom_kill": "was killed by the kernel's OOM killer",
    "collective_desync": "issued collectives the other ranks did not (a collective desync)",
    "collective_unfinished": "never completed its collective, with no other rank to wait for (a one-rank job)",
    "elsewhere": "is elsewhere while the other ranks wait in a collective",
    "other_collective": "waits in another collective than the others",
    "gpu_wait": "is blocked on its GPU",
    "rank_missing": "is gone while the other ranks wait for it",
    "rank_stopped": "is stopped (SIGSTOP, or a debugger holds it) while the other ranks wait for it",
    "straggler": "is behind the other ranks (a straggler)",
    "all_waiting": "every rank waits in the same collective, none of them elsewhere",
    "fatal_signal": "died of a fatal signal",
    "sigsegv": "was killed by SIGSEGV (a segmentation fault: a bad memory access in native code)",
    "sigabrt": "was killed by SIGABRT (an abort: a failed check in native code, or a C++ exception not caught)",
    "sigabrt_at_exit": (
        "aborted while it was exiting ('terminate called without an active exception': its main returned "
        "or it called sys.exit with torch.distributed's threads still running)"
    ),
    "sigbus": "was killed by SIGBUS (a bad memory access: a file mapped in memory was cut, or /dev/shm is full)",
    "sigfpe": "was killed by SIGFPE (an arithmetic error in native code)",
    "sigill": "was killed by SIGILL (an illegal instruction: code built for another CPU)",
    "tracebacks_elsewhere": (
        "exited with an error code, and no traceback of it is in this output (its own output is "
        "elsewhere, or it ended by sys.exit or os._exit without one)"
    ),
    "native_crash": "crashed in native code",
    "segfault": "crashed (segmentation fault)",
    "gpu_xid": "its GPU reported an error (NVIDIA Xid)",
    "gpu_ecc": "its GPU reported a memory (ECC) error",
    "exited_early": "exited while the other ranks still run",
    "exit_code": "exited with an error code",
    "port_in_use": "could not listen: the rendezvous port is already in use (another job or a leftover process holds it)",
    "ranks_never_joined": "never joined the others at start-up (the rendezvous timed out waiting)",
    "store_unreachable": "could not reach the rendezvous store (MASTER_ADDR:MASTER_PORT, or --rdzv-endpoint)",
    "monitored_barrier": "did not reach monitored_barrier (rank 0 timed out waiting)",
    "nccl_id_wait": (
        "never reached the collective that sets up the NCCL communicator (the other ranks waited for its id)"
    ),
    "ddp_unused_parameters": (
        "stopped in DDP: parameters of the model got no gradient (not used in the loss, and "
        "find_unused_parameters is off)"
    ),
    "native_assert": "failed an assert() in native code (the process aborted)",
    "ddp_model_mismatch": "built another model than the other ranks (DDP found other parameter counts when it wrapped it)",
}


def _desync_words(what: str, issued: str, elsewhere: bool = False) -> str:
    """What the recorders' first divergence says the culprit did: never issued or skipped a
    collective the others issued; else ``issued`` (one the others did not). ``elsewhere``: its live
    stacks show it in no collective (in its own code): it has not reached the one the others wait in."""
    first = what.split(";", 1)[0]
    if " never issued " in first and elsewhere:
        return "never issued the collective the other ranks wait in: its stacks show it elsewhere, in no collective"
    if " never issued " in first:
        return "never issued a collective that other ranks issued (a collective desync)"
    if " skipped " in first:
        return "skipped a collective that the other ranks issued (a collective desync)"
    return issued


#: Where a long message is cut, best first, and how far into it at least (a share of the limit):
#: the end of a sentence, of a clause, else a word.
_CUTS = ((". ", 0.4), ("; ", 0.5), (", ", 0.6), (" ", 0.6))


def _short(text: str, limit: int = 160) -> str:
    """The message's first line, at most ``limit`` characters: cut at the last end of a sentence or
    clause well into it (else at a word), so a verdict never ends mid-word."""
    line = text.strip().splitlines()[0] if text.strip() else text
    if len(line) <= limit:
        return line
    head = line[: limit - 1]
    for mark, share in _CUTS:
        at = head.rfind(mark)
        if at >= limit * share:
            return head[: at + (1 if mark != " " else 0)].rstrip(" ,;") + " …"
    return head + "…"


def _location(finding: Finding, gathered: Gathered, places: dict[int, str]) -> Optional[str]:
    if finding.source and (finding.source, finding.line) in gathered.log_places:
        return gathered.log_places[(finding.source, finding.line)]
    if finding.where and "(" in finding.where:
        return finding.where
    ranks = _ranks_of(finding)
    for rank in ranks:
        if rank in places:
            return places[rank]
    return finding.where


#: torch's message of an NCCL failure: ``NCCL error in: FILE:LINE, unhandled system error (run with
#: NCCL_DEBUG=INFO for details), NCCL version 2.20.5`` (``NCCL_DEBUG=WARN`` in later versions): what NCCL
#: said went wrong is the middle.
_NCCL_ERROR = re.compile(
    r"NCCL error in: [^,]+, (.+?)(?: \(run with NCCL_DEBUG=\w+ for details\))?, NCCL version"
)


def _nccl_words(finding: Finding, gathered: Gathered) -> Optional[str]:
    """``torch.distributed.DistBackendError: NCCL error (unhandled system error); NCCL's last error: ...``
    for an NCCL failure whose ``Last error:`` detail followed it (the part of the message that says
    what failed), else None."""
    said = gathered.log_reasons.get((finding.source, finding.line), [])
    last = next((text for text in said if text.startswith(CITED[1])), None)
    found = _NCCL_ERROR.search(finding.what)
    if last is None or found is None:
        return None
    kind = finding.what.split(":", 1)[0]
    return _short(f"{kind}: NCCL error ({found.group(1)}); {last}", 300)


def _elsewhere(gathered: Gathered, ranks: Sequence[int]) -> bool:
    """Whether the live stacks show every one of ``ranks`` outside any collective while others wait."""
    report = gathered.stacks
    if not ranks or report is None or report.diagnosis is None:
        return False
    outside = {
        m.rank
        for f in report.diagnosis.findings
        if f.kind == "elsewhere" and not f.collective
        for m in f.members
    }
    return set(ranks) <= outside


def _hypothesis(
    finding: Finding, gathered: Gathered, places: dict[int, str], lent: Optional[str] = None
) -> Hypothesis:
    """``lent``: the launcher's local rank (its ``who``) the finding is about, to be named so."""
    ranks = [] if finding.cause == "all_waiting" else _ranks_of(finding)  # no rank to blame
    group = (
        gathered.log_group_ranks.get((finding.source, finding.line))
        if finding.kind == Kind.TRACEBACK
        else None
    )
    if group and ranks and set(ranks) <= set(group):
        ranks = group  # every rank that raised the same error, not its first copy's alone
    words = _WORDS.get(finding.cause, finding.cause.replace("_", " "))
    if finding.cause == "python_exception" and finding.what:
        words = f"raised {_nccl_words(finding, gathered) or short_oom(finding.what) or _short(finding.what)}"
    if finding.cause == "cpp_exception":
        words = f"aborted on an uncaught C++ exception: {_short(finding.what.removesuffix(CPP_UNCAUGHT))}"
    if finding.cause == "collective_desync":
        words = _desync_words(finding.what, words, _elsewhere(gathered, _ranks_of(finding)))
    if finding.cause == "watchdog_timeout" and ABSENT in finding.what:
        timed_out = finding.what.split(";")[0].split(": ")[0]
        words = f"reported no timeout, the likely rank that never joined: {timed_out}"
    named_words = finding.cause in _WORDS or finding.cause in ("python_exception", "cpp_exception")
    if not named_words and finding.kind in (Kind.NCCL, Kind.NETWORK) and ranks:
        # NCCL's own words (a WARN line) for a process whose rank is known (torchrun's summary, its pid)
        text = f"{rank_word(ranks)}: {_short(finding.what, 300)}"
    elif lent is not None:
        text = f"{local_words(lent)} {words}"
    elif finding.cause == "all_waiting" or not ranks:
        # no rank to name: what the evidence says, after the process it names where it names one
        # that is no rank (a Ray worker's pid=N, NCCL's host,pid=N)
        named = finding.who if finding.who and not finding.what.startswith(finding.who) else None
        text = _short(f"{named}: {finding.what}" if named else finding.what, 300)
    else:
        text = f"{rank_word(ranks)} {words}"
    return Hypothesis(
        cause=finding.cause,
        text=text,
        ranks=ranks,
        location=_location(finding, gathered, places),
        kind=finding.kind.value,
        evidence=evidence_of(finding, gathered),
        next_step=finding.next_step,
    )


def evidence_of(finding: Finding, gathered: Gathered) -> list[Evidence]:
    """A finding's line as evidence, and what NCCL said after its error (a DistBackendError's error
    name and ``Last error:`` detail), cited from the same place."""
    source = source_words(finding)
    said = gathered.log_reasons.get((finding.source, finding.line), [])
    return [Evidence(source, finding.what), *(Evidence(source, text) for text in said)]


def source_words(finding: Finding) -> str:
    """Where a finding's line comes from, as its evidence names it (``job.log:3``)."""
    if finding.line and not finding.source.startswith(("kernel", "crash", "core", "torchelastic")):
        return f"{finding.source}:{finding.line}"
    if finding.line and finding.source == "kernel messages":
        return f"kernel messages, line {finding.line}"
    return finding.source


def user_places(gathered: Gathered) -> dict[int, str]:
    """rank -> the user's frame where its live stack (or its crash/term dump) is."""
    from rankscope.stacks.frames import locate

    places: dict[int, str] = dict(gathered.traced)  # a trace ring's last place: the weakest
    if gathered.stacks is not None:
        for group in gathered.stacks.main_groups():
            place = locate(group.frames)
            words = frame_words(place.caller or place.innermost)
            if words is None or ended_main(place.innermost):  # no place of the user's: it ended
                continue
            for member in group.members:
                if member.rank is not None:
                    places[member.rank] = words
    for item in gathered.rank_files:  # a rank's own dump wins over a ring
        if item.rank is not None and item.location:
            places[item.rank] = item.location
    return places


def hypotheses(findings: Sequence[Finding], gathered: Gathered) -> list[Hypothesis]:
    """The verdict first (rankscope.evidence.decide), then every other cause, strongest kind first;
    findings of one cause and ranks are one hypothesis with each finding's line as evidence (a local
    rank's of one node: a launcher's local rank 1 on worker-0 is not worker-1's)."""
    places = user_places(gathered)
    local = local_ranks(findings)
    verdict = decide(findings)
    others = sorted((f for f in culprits(findings) if f is not verdict), key=lambda f: (_tier(f), f.order))
    ordered = ([verdict] if verdict is not None else []) + others
    keyed: dict[tuple[str, tuple[int, ...], Optional[str]], list[Finding]] = {}
    for finding in ordered:
        node = ((finding.who or "").rpartition(":")[0] or None) if local and finding in local else None
        keyed.setdefault((finding.cause, tuple(_ranks_of(finding)), node), []).append(finding)
    out: list[Hypothesis] = []
    for members in keyed.values():
        # named as its launcher's local rank, unless another line names that number as a rank of the
        # job (torchrun's summary of the same death)
        lent = members[0].who if all(f in local for f in members) else None
        hypothesis = _hypothesis(members[0], gathered, places, lent)
        for finding in members[1:]:
            hypothesis.evidence.extend(evidence_of(finding, gathered))
        out.append(hypothesis)
    if out:
        _singled_out(out[0], verdict, findings)
        _support(out[0], findings, verdict, gathered)
        _others(out[0], gathered)
        for rank in out[0].ranks:
            if rank in gathered.traced:
                out[0].evidence.append(
                    Evidence("trace rings", f"rank {rank} was last at {gathered.traced[rank]}")
                )
        # a weaker cause about the same ranks whose every line already supports the verdict says nothing more
        shown = {(e.source, e.text) for e in out[0].evidence}
        out[1:] = [
            h
            for h in out[1:]
            if h.ranks != out[0].ranks or not all((e.source, e.text) in shown for e in h.evidence)
        ]
    return out


#: Causes of live stacks that single out ranks that still run (a rank not found is not one).
_LIVE_CULPRITS = ("elsewhere", "other_collective", "gpu_wait")


def _singled_out(first: Hypothesis, verdict: Optional[Finding], findings: Sequence[Finding]) -> None:
    """An error in the job's output that names no rank (no rank prefix: ``logging.exception``, an
    ``mp.spawn`` job, a plain ``python train.py``) while the live stacks single out one set of ranks
    that still run: the verdict names those ranks, and says how it knows."""
    output = (Kind.TRACEBACK, Kind.EXCEPTION_LINE, Kind.CUT_TRACEBACK)
    if verdict is None or first.ranks or verdict.kind not in output:
        return
    sets = {
        tuple(_ranks_of(f))
        for f in findings
        if f.source == "stacks" and f.cause in _LIVE_CULPRITS and f.role == CULPRIT
    }
    sets.discard(())
    if len(sets) != 1:
        return
    ranks = list(next(iter(sets)))
    who = rank_word(ranks)
    first.ranks = ranks
    said = (
        f"raised {short_oom(verdict.what) or _short(verdict.what)}"
        if verdict.cause == "python_exception"
        else f"wrote {_short(verdict.what)}"
    )
    first.text = f"{who} {said} (the output names no rank; the live stacks single out {who})"


def _others(first: Hypothesis, gathered: Gathered) -> None:
    """Where the other ranks are, as the live stacks show (what the culprit keeps them waiting in)."""
    report = gathered.stacks
    if report is None or report.diagnosis is None:
        return
    for finding in report.diagnosis.findings:
        ranks = {m.rank for m in finding.members if m.rank is not None}
        if finding.collective and not ranks & set(first.ranks) and first.cause != "all_waiting":
            first.evidence.append(Evidence("stacks", finding.text))


def _support(
    first: Hypothesis, findings: Sequence[Finding], verdict: Optional[Finding], gathered: Gathered
) -> None:
    """More lines for the verdict: every other finding about its ranks (victims' included)."""
    seen = {(e.source, e.text) for e in first.evidence}
    for finding in findings:
        if finding is verdict:
            continue
        ranks = _ranks_of(finding)
        # live stacks that name no rank support it too; those that single out other ranks (elsewhere,
        # another collective, their GPU) are a competing story, not its evidence
        about = bool(set(ranks) & set(first.ranks)) or (
            finding.kind == Kind.STACKS and first.ranks and not ranks
        )
        if not about:
            continue
        lines = evidence_of(finding, gathered)  # its line, and what NCCL said after it, together
        if (lines[0].source, lines[0].text) not in seen:
            seen.update((e.source, e.text) for e in lines)
            first.evidence.extend(lines)


# ------------------------------------------------------------------------ rank states


def rank_states(gathered: Gathered) -> list[RankState]:
    """Each rank's state, ranks in the same state merged: live stacks, ended ranks, ranks not found."""
    from rankscope.stacks.frames import locate

    states: dict[str, tuple[list[int], set[str]]] = {}

    def add(state: str, rank: int, host: str) -> None:
        ranks, hosts = states.setdefault(state, ([], set()))
        if rank not in ranks:
            ranks.append(rank)
        if host:
            hosts.add(host)

    seen: set[int] = set()
    if gathered.stacks is not None:
        for group in gathered.stacks.main_groups():
            place = locate(group.frames)
            text = place.text(plural=False)
            for member in group.members:
                if member.rank is not None:
                    seen.add(member.rank)
                    add(text, member.rank, member.host)
    for dead in gathered.dead:
        if dead.rank is not None and dead.rank not in seen:
            seen.add(dead.rank)
            how = (
                f"killed by {signal_name(dead.signal)}"
                if dead.signal
                else f"exited with code {dead.exit_code}"
            )
            add(f"ended: {how}", dead.rank, dead.host)
    for item in gathered.rank_files:
        if item.rank is not None and item.rank not in seen and item.kind in ("crash", "term"):
            seen.add(item.rank)
            how = "died of a fatal signal" if item.kind == "crash" else "ended by SIGTERM"
            add(f"{how}" + (f" in {item.location}" if item.location else ""), item.rank, "")
    if gathered.stacks is not None and gathered.stacks.diagnosis is not None:
        for proc in gathered.stacks.processes:
            if proc.was_stopped and proc.rank.rank is not None and proc.rank.rank not in seen:
                seen.add(proc.rank.rank)
                add(
                    f"stopped (SIGSTOP): resume it with kill -CONT {proc.pid}", proc.rank.rank, proc.rank.host
                )
        for rank in gathered.stacks.diagnosis.missing_ranks:
            if rank not in seen:
                seen.add(rank)
                add("not found (exited, or on a node not examined)", rank, "")
    for rank, last in gathered.traced.items():
        if rank not in seen:
            add(f"last seen by its trace ring at {last}", rank, "")
    return [
        RankState(str(RankSet.of(ranks)), sorted(ranks), state, sorted(hosts))
        for state, (ranks, hosts) in sorted(states.items(), key=lambda kv: min(kv[1][0]))
    ]


# ------------------------------------------------------------------------ the report


def victims_only(findings: Sequence[Finding]) -> Optional[str]:
    """With no culprit: the note that every error seen is a victim's (a lost peer), and what that
    leaves (the rank that failed first said nothing here); None when no victim's error was seen."""
    lost = [f for f in findings if f.role == VICTIM and f.kind in (Kind.TRACEBACK, Kind.EXCEPTION_LINE)]
    if not lost:
        return None
    first = min(lost, key=lambda f: f.order)
    who = f"rank {first.global_rank}" if first.global_rank is not None else (first.who or "a process")
    # an error a rank caught and went on from, written before every victim's: the likeliest start
    caught = [
        f for f in findings
        if f.role == HANDLED and f.kind == Kind.TRACEBACK and f.source == first.source and f.order < first.order
    ]  # fmt: skip
    if caught:
        lead = min(caught, key=lambda f: f.order)
        by = (
            f"rank {lead.global_rank}"
            if lead.global_rank is not None
            else (lead.who or "a process without a rank")
        )
        return (
            f"{VICTIMS_ONLY} ({who}: {_short(first.what, 120)}); before them {by} caught "
            f"{_short(lead.what, 120)} and went on ({lead.source}:{lead.line}): a rank that skips or reorders "
            "a collective after an error it caught leaves the others waiting until they time out"
        )
    running = still_running(findings)
    if running:
        return f"{VICTIMS_ONLY} ({who}: {_short(first.what, 120)}); {still_running_words(running)}"
    finished = finished_early(findings)
    if finished:
        return f"{VICTIMS_ONLY} ({who}: {_short(first.what, 120)}); {finished_words(finished)}"
    return (
        f"{VICTIMS_ONLY} ({who}: {_short(first.what, 120)}): "
        "the rank that ended first left no error here; it returned from its main early (exit code 0, "
        "which no launcher reports), was killed, or wrote elsewhere (name its output with --log)"
    )


def outcome_of(verdict: Optional[Hypothesis], gathered: Gathered, victims: Optional[str] = None) -> str:
    # kernel messages are the node's, not the job's: alone they are nothing to judge
    read = [s for s in gathered.signals if s.state == READ and not s.name.endswith("kernel messages")]
    if verdict is not None:
        return CAUSE
    if victims is not None:  # something failed, and what says which rank first is not here
        return PARTIAL
    if not read:
        return PARTIAL if any(s.state == FAILED for s in gathered.signals) else NOTHING
    stacks = gathered.stacks
    dumped = stacks is not None and any(p.dumped for p in stacks.processes)
    if gathered.failures or (stacks is not None and stacks.failures) or (not dumped and not gathered.logs):
        return PARTIAL
    return NO_PROBLEM


def weigh(gathered: Gathered, seconds: float = 0.0) -> WhyReport:
    """The report: verdict, hypotheses, rank states, signals, and the signals' own documents."""
    findings = all_findings(gathered)
    found = hypotheses(findings, gathered)
    verdict = found[0] if found else None
    victims = victims_only(findings) if verdict is None else None
    report = WhyReport(
        outcome=outcome_of(verdict, gathered, victims),
        verdict=verdict,
        hypotheses=found[1:],
        ranks=rank_states(gathered),
        signals=list(gathered.signals),
        hosts=list(gathered.hosts),
        seconds=seconds,
        notes=[*gathered.notes, *([victims] if victims else [])],
        findings=findings,
        kernel=list(gathered.kernel),
        dead=list(gathered.dead),
        rank_files=list(gathered.rank_files),
        cores=list(gathered.cores),
        gpus=list(gathered.gpus),
        logs=list(gathered.logs),
        failures=list(gathered.failures),
        nodes=gathered.nodes,
        stacks=gathered.stacks,
        fr=gathered.fr,
    )
    _gpu_lines(report, gathered)
    return report


def _gpu_lines(report: WhyReport, gathered: Gathered) -> None:
    """A rank blocked on its GPU: what its GPU shows (utilisation, memory, ECC) as evidence."""
    verdict = report.verdict
    if verdict is None or verdict.cause != "gpu_wait":
        return
    for gpu in gathered.gpus:
        words = [f"GPU {gpu.index} ({gpu.name})" if gpu.name else f"GPU {gpu.index}"]
        if gpu.utilization is not None:
            busy = "a kernel runs (or never ends)" if gpu.utilization >= 90 else "nearly idle"
            words.append(f"utilization {gpu.utilization}%: {busy}")
        if gpu.memory_used_mib is not None:
            words.append(f"{gpu.memory_used_mib} MiB used")
        if gpu.ecc_uncorrected:
            words.append(f"{gpu.ecc_uncorrected} uncorrected ECC errors")
        verdict.evidence.append(Evidence(f"{gpu.source} on {gpu.host}", ", ".join(words)))

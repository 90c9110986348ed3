"""Every signal turned into findings of the one evidence model, weighed into a verdict (pure).

Each source gives :class:`rankscope.evidence.Finding` objects (``source`` names where the line
comes from); :func:`rankscope.evidence.decide` picks the root cause by its written precedence; the
other culprits become the weaker hypotheses, strongest kind first. Every rank's state is listed,
merged by equal state as `stacks` merges equal stacks.
"""

from __future__ import annotations

import signal as signals_module
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from rankscope.evidence import CULPRIT, PRECEDENCE, VICTIM, Finding, Kind, decide
from rankscope.folding import fold_ints, parse_ints
from rankscope.model import Frame, parse_label
from rankscope.why.kernel import XID_CONSEQUENCE, XID_ECC, xid_words
from rankscope.why.report import (
    CAUSE,
    FAILED,
    NO_PROBLEM,
    NOTHING,
    PARTIAL,
    READ,
    Evidence,
    Hypothesis,
    RankState,
    WhyReport,
)
from rankscope.why.signals import Gathered

if TYPE_CHECKING:
    from rankscope.stacks.report import StacksReport

KILLED_STEP = (
    "SIGKILL comes from outside the process: the kernel's OOM killer (host memory) or the scheduler "
    "(a time or memory limit); `journalctl -k | grep -i oom` on that node, `sacct -j JOB` under SLURM"
)


def signal_name(number: int) -> str:
    try:
        return signals_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def frame_words(frame: Optional[Frame]) -> Optional[str]:
    if frame is None:
        return None
    return f"{frame.function} ({frame.short_filename}:{frame.line})"


def _rank_word(ranks: Sequence[int]) -> str:
    return f"{'ranks' if len(ranks) > 1 else 'rank'} {fold_ints(ranks)}"


# ------------------------------------------------------------------------ findings per source


def stacks_findings(gathered: Gathered) -> list[Finding]:
    """Live stacks: ranks elsewhere (or blocked on their GPU) while others wait; ranks not found;
    every rank in one collective."""
    report = gathered.stacks
    if report is None or report.diagnosis is None:
        return []
    out: list[Finding] = []
    diagnosis = report.diagnosis
    waiting = any(f.collective for f in diagnosis.findings)
    for finding in diagnosis.findings:
        ranks = sorted({m.rank for m in finding.members if m.rank is not None})
        where = frame_words(finding.called_from or finding.innermost)
        first = ranks[0] if ranks else None
        if finding.kind == "elsewhere" and waiting and any(m in diagnosis.divergent for m in finding.members):
            cause = "gpu_wait" if finding.gpu_wait else "elsewhere"
            text = finding.text + _ended_main(finding.innermost)
            out.append(
                Finding(Kind.STACKS, cause, CULPRIT, str(first), text, where, "stacks", 0, 0, first,
                        ranks=fold_ints(ranks))
            )  # fmt: skip
        elif finding.kind == "waiting" and any(m in diagnosis.divergent for m in finding.members):
            out.append(
                Finding(Kind.STACKS, "other_collective", CULPRIT, str(first), finding.text, where, "stacks", 0, 1,
                        first, ranks=fold_ints(ranks))
            )  # fmt: skip
        elif finding.kind == "together" and finding.gpu_wait:
            out.append(
                Finding(Kind.STACKS, "gpu_wait", CULPRIT, str(first), finding.text, where, "stacks", 0, 0, first,
                        ranks=fold_ints(ranks))
            )  # fmt: skip
        elif finding.kind == "together" and finding.collective and not diagnosis.missing_ranks:
            out.append(
                Finding(Kind.STACKS, "all_waiting", CULPRIT, None, finding.text, where, "stacks", 0, 3,
                        ranks=fold_ints(ranks))
            )  # fmt: skip
    out.extend(_stragglers(report, waiting))
    for rank in diagnosis.missing_ranks:
        out.append(
            Finding(Kind.STACKS, "rank_missing", CULPRIT, str(rank),
                    f"rank {rank} was not found among the job's processes while the others are there",
                    None, "stacks", 0, 2, rank)
        )  # fmt: skip
    return out


def _ended_main(frame: Optional[Frame]) -> str:
    """A main thread in threading's ``_shutdown``: it ended, and a thread it started keeps the process."""
    if frame is not None and frame.function == "_shutdown" and frame.filename.endswith("threading.py"):
        return (
            " (its main thread has ended, by an uncaught exception or a return, and a non-daemon thread "
            "keeps the process alive: look for its traceback in the job's output)"
        )
    return ""


def _stragglers(report: StacksReport, waiting: bool) -> list[Finding]:
    """Ranks whose progress marker is behind the others' while ranks wait in a collective."""
    steps = {p.rank.rank: p.progress.step for p in report.processes
             if p.rank.rank is not None and p.progress is not None and p.progress.step is not None}  # fmt: skip
    if not waiting or len(set(steps.values())) < 2:
        return []
    lowest = min(steps.values())
    behind = sorted(r for r, step in steps.items() if step == lowest)
    ahead = max(steps.values())
    what = f"{_rank_word(behind)} at step {lowest} while other ranks reached step {ahead} (progress markers)"
    return [Finding(Kind.STACKS, "straggler", CULPRIT, str(behind[0]), what, None, "progress markers", 0, 2,
                    behind[0], ranks=fold_ints(behind))]  # fmt: skip


def fr_findings(gathered: Gathered) -> list[Finding]:
    """The flight recorders' first divergence of each group: the odd ranks out."""
    report = gathered.fr
    if report is None:
        return []
    out = []
    for order, divergence in enumerate(report.divergences):
        suspects = sorted(divergence.suspects)
        side = next((s for s in divergence.sides if set(suspects) & set(s.rank_list)), None)
        where = frame_words(side.call_site) if side is not None else None
        out.append(
            Finding(Kind.WATCHDOG, "collective_desync", CULPRIT, str(suspects[0]) if suspects else None,
                    divergence.text, where, "flight recorders", 0, order,
                    suspects[0] if suspects else None, ranks=fold_ints(suspects))
        )  # fmt: skip
    return out


def dead_findings(gathered: Gathered) -> list[Finding]:
    """Ranks that ended while the job runs, by their exit status (their launcher has not reaped them)."""
    out = []
    for dead in gathered.dead:
        who = f"rank {dead.rank}" if dead.rank is not None else "a worker"
        source = f"exit status (/proc/{dead.pid}/stat)"
        if dead.signal is not None:
            name = signal_name(dead.signal)
            cause = name.lower()
            role = VICTIM if dead.signal == signals_module.SIGTERM else CULPRIT
            what = f"{who} (pid {dead.pid}) was killed by {name}"
            step = KILLED_STEP if dead.signal == signals_module.SIGKILL else ""
            if step:
                what += " (the OOM killer or the scheduler)"
            order = 0
        else:
            code = dead.exit_code or 0
            cause = "exit_code" if code else "exited_early"
            role = CULPRIT
            what = f"{who} (pid {dead.pid}) exited with code {code} while the job runs"
            step, order = "", 1
        out.append(
            Finding(Kind.LAUNCHER, cause, role, str(dead.rank) if dead.rank is not None else f"pid={dead.pid}",
                    what, None, source, 0, order, dead.rank, next_step=step)
        )  # fmt: skip
    return out


def kernel_findings(gathered: Gathered) -> list[Finding]:
    """Kernel messages about the job's processes (by pid), and NVIDIA Xids (a GPU serves the node)."""
    out = []
    for event in gathered.kernel:
        rank = gathered.pid_rank.get(event.pid) if event.pid is not None else None
        mine = event.pid is not None and (rank is not None or event.pid in gathered.pid_rank)
        time = event.time if event.time and event.time[0].isdigit() and "-" in event.time else None
        who = str(rank) if rank is not None else (f"pid={event.pid}" if event.pid else None)
        if event.kind == "oom_kill" and mine:
            what = f"the kernel's OOM killer killed rank {rank} (pid {event.pid}): {event.text}"
            out.append(Finding(Kind.KERNEL, "oom_kill", CULPRIT, who, what, None, "kernel messages", event.line,
                               event.line, rank, time, next_step="host memory: fewer workers, smaller batches "
                               "or prefetch, or more memory per task"))  # fmt: skip
        elif event.kind == "segfault" and mine:
            out.append(Finding(Kind.KERNEL, "segfault", CULPRIT, who, f"rank {rank}: {event.text}", None,
                               "kernel messages", event.line, event.line, rank, time))  # fmt: skip
        elif event.kind == "xid" and event.xid is not None and (mine or event.pid is None or rank is None):
            if event.pid is not None and not mine and gathered.pid_rank:
                continue  # another job's process on a shared GPU node
            cause = "gpu_ecc" if event.xid in XID_ECC else "gpu_xid"
            role = VICTIM if event.xid in XID_CONSEQUENCE else CULPRIT
            what = f"NVIDIA Xid {event.xid}: {xid_words(event.xid)}" + (
                f" (rank {rank}, pid {event.pid})" if rank is not None else ""
            )
            out.append(Finding(Kind.KERNEL, cause, role, who, what, None, "kernel messages", event.line,
                               event.line, rank, time,
                               next_step="nvidia-smi -q on that node; an ECC or bus error needs a GPU reset "
                               "or the node drained"))  # fmt: skip
    return out


def file_findings(gathered: Gathered) -> list[Finding]:
    """A rank's own crash dump (faulthandler on a fatal signal), torchelastic error files, cores."""
    out = []
    for item in gathered.rank_files:
        who = str(item.rank) if item.rank is not None else None
        if item.kind == "crash":
            out.append(Finding(Kind.NATIVE_CRASH, "fatal_signal", CULPRIT, who,
                               f"rank {item.rank} died of a fatal signal: {item.what}".strip(": "), item.location,
                               f"crash file {item.path}", 0, 0, item.rank))  # fmt: skip
        elif item.kind == "error_file":
            out.append(Finding(Kind.TRACEBACK, "python_exception", CULPRIT, who, item.what, item.location,
                               f"torchelastic error file {item.path}", 0, 0, item.rank, item.time))  # fmt: skip
    for core in gathered.cores:
        if core.signal is None:
            continue
        rank = core.rank if core.rank is not None else gathered.pid_rank.get(core.pid or -1)
        what = f"{_rank_word([rank]) if rank is not None else core.program} dumped core on {signal_name(core.signal)}"
        out.append(Finding(Kind.NATIVE_CRASH, "native_crash", CULPRIT, str(rank) if rank is not None else None,
                           what, None, f"core {core.path}", 0, 1, rank,
                           next_step=f"rankscope core bt {core.path}"))  # fmt: skip
    return out


def all_findings(gathered: Gathered) -> list[Finding]:
    if gathered.merged:
        return [*gathered.node_findings, *fr_findings(gathered), *stacks_findings(gathered)]
    return [
        *gathered.log_findings,
        *file_findings(gathered),
        *kernel_findings(gathered),
        *dead_findings(gathered),
        *fr_findings(gathered),
        *stacks_findings(gathered),
    ]


# ------------------------------------------------------------------------ hypotheses


def _tier(finding: Finding) -> int:
    for index, kinds in enumerate(PRECEDENCE):
        if finding.kind in kinds:
            return index
    return len(PRECEDENCE)


def _ranks_of(finding: Finding) -> list[int]:
    """The global ranks a finding blames: the folded ranks of stacks and recorders, else its rank."""
    if finding.source in ("stacks", "flight recorders", "progress markers") and finding.ranks:
        return parse_ints(finding.ranks)
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
    "sigkill": "was killed by SIGKILL (the OOM killer or the scheduler)",
    "oom_kill": "was killed by the kernel's OOM killer",
    "collective_desync": "issued collectives the other ranks did not (a collective desync)",
    "elsewhere": "is elsewhere while the other ranks wait in a collective",
    "other_collective": "waits in another collective than the others",
    "gpu_wait": "is blocked on its GPU",
    "rank_missing": "is gone while the other ranks wait for it",
    "straggler": "is behind the other ranks (a straggler)",
    "all_waiting": "every rank waits in the same collective, none of them elsewhere",
    "fatal_signal": "died of a fatal signal",
    "native_crash": "crashed in native code",
    "segfault": "crashed (segmentation fault)",
    "gpu_xid": "its GPU reported an error (NVIDIA Xid)",
    "gpu_ecc": "its GPU reported a memory (ECC) error",
    "exited_early": "exited while the other ranks still run",
    "exit_code": "exited with an error code",
}


def _short(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[: limit - 1] + "…"


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


def _hypothesis(finding: Finding, gathered: Gathered, places: dict[int, str]) -> Hypothesis:
    ranks = [] if finding.cause == "all_waiting" else _ranks_of(finding)  # no rank to blame
    words = _WORDS.get(finding.cause, finding.cause.replace("_", " "))
    if finding.cause == "python_exception" and finding.what:
        words = f"raised {_short(finding.what)}"
    if finding.cause == "all_waiting" or not ranks:
        text = _short(finding.what, 300)  # no rank to name: what the evidence says
    else:
        text = f"{_rank_word(ranks)} {words}"
    return Hypothesis(
        cause=finding.cause,
        text=text,
        ranks=ranks,
        location=_location(finding, gathered, places),
        kind=finding.kind.value,
        evidence=[Evidence(_source(finding), finding.what)],
        next_step=finding.next_step,
    )


def _source(finding: Finding) -> str:
    if finding.line and not finding.source.startswith(("kernel", "crash", "core", "torchelastic")):
        return f"{finding.source}:{finding.line}"
    if finding.line and finding.source == "kernel messages":
        return f"kernel messages, line {finding.line}"
    return finding.source


def user_places(gathered: Gathered) -> dict[int, str]:
    """rank -> the user's frame where its live stack (or its crash/term dump) is."""
    from rankscope.stacks.explain import locate

    places: dict[int, str] = dict(gathered.traced)  # a trace ring's last place: the weakest
    if gathered.stacks is not None:
        for group in gathered.stacks.main_groups():
            place = locate(group.frames)
            words = frame_words(place.caller or place.innermost)
            if words is None:
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
    findings of one cause and ranks are one hypothesis with each finding's line as evidence."""
    places = user_places(gathered)
    verdict = decide(findings)
    culprits = sorted(
        (f for f in findings if f.role == CULPRIT and f is not verdict), key=lambda f: (_tier(f), f.order)
    )
    ordered = ([verdict] if verdict is not None else []) + culprits
    out: list[Hypothesis] = []
    keyed: dict[tuple[str, tuple[int, ...]], Hypothesis] = {}
    for finding in ordered:
        key = (finding.cause, tuple(_ranks_of(finding)))
        if key in keyed:
            keyed[key].evidence.append(Evidence(_source(finding), finding.what))
            continue
        hypothesis = _hypothesis(finding, gathered, places)
        keyed[key] = hypothesis
        out.append(hypothesis)
    if out:
        _support(out[0], findings, verdict)
        _others(out[0], gathered)
        for rank in out[0].ranks:
            if rank in gathered.traced:
                out[0].evidence.append(
                    Evidence("trace rings", f"rank {rank} was last at {gathered.traced[rank]}")
                )
    return out


def _others(first: Hypothesis, gathered: Gathered) -> None:
    """Where the other ranks are, as the live stacks show (what the culprit keeps them waiting in)."""
    report = gathered.stacks
    if report is None or report.diagnosis is None:
        return
    for finding in report.diagnosis.findings:
        ranks = {m.rank for m in finding.members if m.rank is not None}
        if finding.collective and not ranks & set(first.ranks) and first.cause != "all_waiting":
            first.evidence.append(Evidence("stacks", finding.text))


def _support(first: Hypothesis, findings: Sequence[Finding], verdict: Optional[Finding]) -> None:
    """More lines for the verdict: every other finding about its ranks (victims' included)."""
    seen = {(e.source, e.text) for e in first.evidence}
    for finding in findings:
        if finding is verdict:
            continue
        ranks = _ranks_of(finding)
        about = bool(set(ranks) & set(first.ranks)) or (finding.kind == Kind.STACKS and first.ranks)
        if not about:
            continue
        line = (_source(finding), finding.what)
        if line not in seen:
            seen.add(line)
            first.evidence.append(Evidence(*line))


# ------------------------------------------------------------------------ rank states


def rank_states(gathered: Gathered) -> list[RankState]:
    """Each rank's state, ranks in the same state merged: live stacks, ended ranks, ranks not found."""
    from rankscope.stacks.explain import locate

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
        for rank in gathered.stacks.diagnosis.missing_ranks:
            if rank not in seen:
                seen.add(rank)
                add("not found (exited, or on a node not examined)", rank, "")
    for rank, last in gathered.traced.items():
        if rank not in seen:
            add(f"last seen by its trace ring at {last}", rank, "")
    return [
        RankState(fold_ints(ranks), sorted(ranks), state, sorted(hosts))
        for state, (ranks, hosts) in sorted(states.items(), key=lambda kv: min(kv[1][0]))
    ]


# ------------------------------------------------------------------------ the report


def outcome_of(verdict: Optional[Hypothesis], gathered: Gathered) -> str:
    # kernel messages are the node's, not the job's: alone they are nothing to judge
    read = [s for s in gathered.signals if s.state == READ and not s.name.endswith("kernel messages")]
    if verdict is not None:
        return CAUSE
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
    report = WhyReport(
        outcome=outcome_of(verdict, gathered),
        verdict=verdict,
        hypotheses=found[1:],
        ranks=rank_states(gathered),
        signals=list(gathered.signals),
        hosts=list(gathered.hosts),
        seconds=seconds,
        notes=list(gathered.notes),
        findings=findings,
        kernel=list(gathered.kernel),
        dead=list(gathered.dead),
        rank_files=list(gathered.rank_files),
        cores=list(gathered.cores),
        gpus=list(gathered.gpus),
        logs=list(gathered.logs),
        failures=list(gathered.failures),
        nodes=gathered.nodes,
    )
    if gathered.stacks is not None:
        from rankscope.stacks.report import report_document

        report.stacks = report_document(gathered.stacks)
    if gathered.fr is not None:
        from rankscope.fr.report import report_document as fr_document

        report.fr = fr_document(gathered.fr)
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

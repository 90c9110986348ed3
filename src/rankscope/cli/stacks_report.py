"""The local half of `rankscope stacks`: collect on this node, diagnose, print, keep --out files."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from rankscope.cli.progress import tty_progress
from rankscope.model import NodeStatus, Stage
from rankscope.stacks.local import process_started, run_local
from rankscope.stacks.options import StacksOptions

# pathlib, json, the exit codes and the report's modules are imported while the dumps run or after
# them (rankscope.stacks.local, AFTER_DUMPS): before them only what finds and dumps the ranks.
if TYPE_CHECKING:
    from pathlib import Path

    from rankscope.cli.stacks import StacksRequest
    from rankscope.stacks.local import LocalResult
    from rankscope.stacks.report import Diagnosis, StacksReport

NOTHING_FOUND = (
    "rankscope: error: no distributed job found on this node (no torchrun/deepspeed/accelerate/mpirun/srun "
    "workers with a rank) — name a process with --pid PID, or use --all-python"
)


def report_local(options: StacksOptions, request: StacksRequest) -> int:
    """Run the local pipeline and print its report; returns the exit code (docs/exit-codes.md)."""
    from rankscope.lifetime import StopSignals

    progress = tty_progress()
    try:
        # The header's time is the run as the user waited for it: from this process's start.
        # Ctrl-C or SIGTERM ends the dumps under way and still prints what was collected.
        with StopSignals() as stop:
            result = run_local(options, progress=progress, started=process_started(), stop=stop)
    finally:
        if progress is not None:
            progress.clear()
    import json

    from rankscope.cli.outcome import exit_code, stopped_exit_code
    from rankscope.errors import ExitCode
    from rankscope.stacks.analyse import diagnose, not_found_here
    from rankscope.stacks.render import stray_text
    from rankscope.stacks.report import report_document

    report = result.report
    diagnosis = report.diagnosis = report.diagnosis or diagnose(report)
    dumped = sum(1 for p in report.processes if p.dumped)
    code = exit_code(
        len(report.processes), dumped, report.failures, not_found_here(report, diagnosis.missing_ranks)
    )
    if code == ExitCode.NOTHING_FOUND and not request.as_json:
        sys.stderr.write(NOTHING_FOUND + "\n")
        for stray in report.strays or []:  # rank carriers of no job: say what was seen and left out
            sys.stderr.write(f"  not part of any job: {stray_text(stray)}\n")
        return int(code)
    if not report.processes and code == ExitCode.PERMISSION_DENIED and not request.as_json:
        # Another user's job, invisible to this one: one line saying whose and why, no empty report.
        first = report.failures[0]
        sys.stderr.write(f"rankscope: error: {first.reason} — {first.hint}\n")
        return int(code)
    if request.local and request.as_json and result.recorders is not None:
        # `--local --json` is what every node of a multi-node run answers: the head aligns all ranks.
        from dataclasses import replace

        from rankscope.serial import to_json
        from rankscope.stacks.fr_live import compact, node_peers

        peers = node_peers(stack_waits(request, result, True))
        report.fr_records = to_json(replace(compact(result.recorders), p2p_peers=peers))
    document = report_document(report) if request.as_json or request.out_dir is not None else {}
    live = live_verdict(result)
    waits = stack_waits(request, result, live)
    with_fr(request, document, live, waits)
    kept, shown = render_for(request, report, diagnosis, live=live, waits=waits, outcomes=result.outcomes)
    if request.out_dir is not None:
        save_outputs(request.out_dir, result, document, kept or "", request.force)
    # One place for a failure: the report (text or JSON) on stdout lists every one; stderr is only
    # for a run with no report at all (nothing found, another user's job, a bad command line).
    out = sys.stdout
    if shown is None:
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        out.write(shown)
        if request.out_dir is not None:  # --folded: stdout holds only folded lines
            (sys.stderr if request.folded else out).write(
                f"\nraw dumps, stacks.json and report.txt: {request.out_dir}/\n"
            )
    out.flush()
    if stop.signum:
        sys.stderr.write(f"rankscope: interrupted by {stop.name}: the report covers what was collected\n")
        return stopped_exit_code(stop.signum)
    return int(code)


def report_saved(request: StacksRequest) -> int:
    """`stacks --from DIR`: the report of a saved run, its groups and diagnosis derived again."""
    import json

    from rankscope.cli.outcome import exit_code
    from rankscope.stacks.analyse import diagnose, not_found_here
    from rankscope.stacks.report import report_document
    from rankscope.stacks.saved import read_saved

    assert request.from_dir is not None
    saved = read_saved(request.from_dir)
    report = saved.report
    live = None  # the verdict the run showed (--fr DUMPS, or its ranks' own recorders)
    if saved.fr is not None:
        from rankscope.fr.report import load_report as load_fr

        with contextlib.suppress(ValueError):
            live = load_fr(saved.fr)
    diagnosis = report.diagnosis or diagnose(report)
    dumped = sum(1 for p in report.processes if p.dumped)
    targets = len(report.nodes) if report.nodes else len(report.processes)
    code = exit_code(targets, dumped, report.failures, not_found_here(report, diagnosis.missing_ranks))
    where = f"{str(request.from_dir).rstrip('/')}/"
    source = f"read from {where} (" + (
        "groups and diagnosis derived again from its raw dumps)"
        if saved.source == "raw dumps"
        else "no raw/ there: groups as stacks.json has them, diagnosis derived again)"
    )
    _, shown = render_for(
        request, report, diagnosis, nodes_title(report.nodes or []), subtitle=source, live=live
    )
    if shown is None:
        sys.stdout.write(json.dumps(with_fr(request, report_document(report), live), indent=2) + "\n")
    else:
        sys.stdout.write(shown)
    sys.stdout.flush()
    return int(code)


def nodes_title(nodes: Sequence[NodeStatus]) -> str:
    """A multi-node report's header: ``2 of 5 nodes (node[01-02])``; "" for a one-node run."""
    if not nodes:
        return ""
    from rankscope.folding import fold_hosts

    answered = [n.node for n in nodes if n.stage == Stage.OK]
    if answered:
        return f"{len(answered)} of {len(nodes)} nodes ({fold_hosts(answered)})"
    return f"none of {len(nodes)} nodes answered ({fold_hosts(n.node for n in nodes)})"


_FR_CACHE: dict[Path, Any] = {}


def live_verdict(result: LocalResult) -> Any:
    """The verdict over the flight recorders the ranks' handlers gave in this run (a rankscope.fr
    FrReport); None when no rank's handler answers, or when the recorders hold no entries."""
    return verdict_of(result.recorders)


def stack_waits(request: StacksRequest, result: LocalResult, live: Any) -> Any:
    """The ranks whose live stack waits in recv/send (peers from --locals), when there is a verdict to join."""
    if live is None and request.fr is None:
        return None
    from rankscope.stacks.fr_live import p2p_waits

    snapshots = [o.snapshot for _, o in result.outcomes if o.snapshot is not None]
    return p2p_waits(result.report.main_groups(), snapshots)


def verdict_of(recorders: Any) -> Any:
    """rankscope.fr's verdict over live recorders (LiveRecorders); None without any, or when empty."""
    if recorders is None:
        return None
    from rankscope.stacks.fr_live import verdict

    report = verdict(recorders)
    return None if report.empty else report


def fr_verdict(request: StacksRequest, live: Any = None, waits: Any = None) -> Any:
    """The `--fr` dumps analysed once (a rankscope.fr FrReport); without --fr, the live recorders'
    verdict ``live`` (None when there is none). ``waits``: the ranks the stacks show waiting in a
    point-to-point call (rankscope.stacks.fr_live.p2p_waits), joined into the verdict."""
    verdict = live
    if request.fr is not None:
        if request.fr not in _FR_CACHE:
            from rankscope.fr.analyse import analyse_path

            _FR_CACHE[request.fr] = analyse_path(request.fr)
        verdict = _FR_CACHE[request.fr]
    if verdict is not None and waits:
        from rankscope.fr.join import join_p2p_waits

        verdict = join_p2p_waits(verdict, waits)
    return verdict


def with_fr(
    request: StacksRequest, document: dict[str, Any], live: Any = None, waits: Any = None
) -> dict[str, Any]:
    """The stacks document with the `--fr` (or live) verdict under ``fr`` (the rankscope.fr document)."""
    verdict = fr_verdict(request, live, waits)
    if verdict is not None and document:
        from rankscope.fr.report import report_document as fr_document

        document["fr"] = fr_document(verdict)
    return document


def render_for(
    request: StacksRequest,
    report: StacksReport,
    diagnosis: Diagnosis,
    title: str = "",
    subtitle: str = "",
    live: Any = None,
    waits: Any = None,
    outcomes: Sequence[Any] = (),
) -> tuple[Optional[str], Optional[str]]:
    """The text report as --out keeps it (plain; None without --out) and as printed (None with --json).

    Nothing is rendered that is not used: a --json run renders no text unless --out keeps it.
    """
    from rankscope.stacks.render import render_text

    use_color = not request.as_json and (sys.stdout.isatty() if request.color is None else request.color)
    verdict = fr_verdict(request, live, waits)
    joined: dict[str, Any] = {}
    if verdict is not None:
        from rankscope.fr.join import group_note, verdict_lines

        above = verdict_lines(verdict)
        if request.fr is None:  # the live recorders: say why a rank gave none (no handler, ...)
            above += [f"  note: {note}" for note in verdict.notes]
        joined = {"above": above, "group_note": group_note(verdict)}
    if request.html is not None:
        from rankscope.cli.pictures import write_stacks_page

        write_stacks_page(request.html, report, diagnosis, request.full, joined.get("above", ()), verdict)
    kept = None
    if request.out_dir is not None or not (request.as_json or use_color):
        kept = render_text(
            report, diagnosis, full=request.full, color=False, title=title, subtitle=subtitle, **joined
        )
    if request.as_json:
        return kept, None
    if request.folded:  # `outcomes`: every sample's dumps of a run on this node
        from rankscope.cli.pictures import folded_text

        return kept, folded_text(report, request.full, outcomes)
    if use_color:
        return kept, render_text(
            report, diagnosis, full=request.full, color=True, title=title, subtitle=subtitle, **joined
        )
    return kept, kept


def save_outputs(
    out_dir: Path, result: LocalResult, document: dict[str, Any], text: str, force: bool = False
) -> None:
    """Keep every raw dump (raw/), the merged JSON and the text report, readable only by the owner.

    The native dumps of representatives (`--native`) are kept beside their Python dumps as
    ``HOST.rank-N.pid-P.native.json``.
    """
    import json

    from rankscope.cli.outfiles import OutDir  # not on a node's `--local --json` path: it imports click
    from rankscope.stacks.node import raw_name

    with OutDir(out_dir, force) as out:
        raw = out.subdir("raw")
        dumps = [(sample, outcome, "") for sample, outcome in result.outcomes]
        dumps += [(result.report.samples - 1, outcome, ".native") for outcome in result.native_outcomes]
        for sample, outcome, kind in dumps:
            body = outcome.raw or (outcome.failure.reason.encode() if outcome.failure else b"")
            out.write(raw_name(outcome, sample, result.report.samples, kind), body, subdir=raw)
        out.write("stacks.json", json.dumps(document, indent=2))
        out.write("report.txt", text)

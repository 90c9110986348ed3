"""The multi-node branch of `rankscope stacks` (--hosts, --hostfile, --jobid): collect, merge, print."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rankscope.cli.stacks import StacksRequest

REMOTE_RANKSCOPE_OPTION = click.option(
    "--remote-rankscope",
    metavar="PATH",
    default="rankscope",
    show_default=True,
    help="rankscope on the nodes (with --hosts/--hostfile/--jobid), e.g. ~/venv/bin/rankscope.",
)

EXAMPLES = """
\b
Many nodes (each sends its /proc files and py-spy's dumps, this side merges):
  rankscope stacks --jobid 2180718                  # every node of a SLURM job, via srun
  rankscope stacks --hosts node-[5,8] --via pdsh    # a node set (ClusterShell syntax)
  rankscope stacks --hostfile hostfile --via ssh --remote-setup '. ~/.pdshrc'
  rankscope stacks --hosts gpu[001-040] --remote-rankscope /opt/venv/bin/rankscope --out traces/
Nodes that could not be read are listed last with the stage they reached:
unreachable, auth refused, no rankscope there, no job found, dump failed, timeout.
Ctrl-C or SIGTERM ends every node's run (here and on the node) and prints what the
nodes gave so far; the others are "interrupted" (exit 130 or 143).
"""


#: What a multi-node run needs once the nodes have answered, imported while they run.
AFTER_FANOUT = (
    "rankscope.stacks.shell_answer",
    "rankscope.cluster.node_answer",
    "rankscope.stacks.merge",
    "rankscope.stacks.analyse",
    "rankscope.cli.stacks_report",
    "rankscope.cli.nodefiles",
)


def run_cluster_stacks(request: StacksRequest) -> int:
    """Every node runs ``request.node_argv()``; the answers are merged, printed and kept (--out)."""
    # The fan-out machinery is imported only when a multi-node run starts.
    from rankscope.cli.progress import tty_progress
    from rankscope.cluster.stacks_remote import stacks_remote
    from rankscope.lifetime import StopSignals, process_started
    from rankscope.meanwhile import Meanwhile

    assert request.cluster is not None
    started = process_started() or time.monotonic()
    # The whole run keeps to --deadline, as a local one does.
    target = replace(request.cluster, overall_timeout=request.options.deadline)
    progress = tty_progress()
    # The nodes start first; what reads, joins and reports their answers is imported while they run
    # (docs/benchmarks.md, "Multi-node: the sh collector").
    warm = Meanwhile(AFTER_FANOUT)
    try:
        with StopSignals() as stop:
            result = stacks_remote(
                target,
                request.node_argv(),
                progress,
                stop,
                shell=not request.node_python,
                keep=request.out_dir is not None,
            )
    finally:
        warm.join()
        if progress is not None:
            progress.clear()
    from rankscope.cli.nodefiles import write_node_files
    from rankscope.cli.outcome import exit_code, stopped_exit_code
    from rankscope.cli.stacks_report import nodes_title, render_for, verdict_of, with_fr
    from rankscope.stacks.analyse import diagnose, not_found_here
    from rankscope.stacks.report import report_document

    report = result.report
    diagnosis = report.diagnosis = diagnose(report)
    # The wall time of the whole run from this process's start (every node's answer included), not the
    # slowest node's own time.
    report.seconds = time.monotonic() - started
    report.nodes = result.node_statuses()
    live = None
    peers: dict[str, int] = {}
    if result.fr_records:
        from rankscope.stacks.fr_live import combine

        recorders = combine(result.fr_records)
        live, peers = verdict_of(recorders), recorders.p2p_peers
    waits = None
    if live is not None or request.fr is not None:
        from rankscope.stacks.fr_live import p2p_waits

        waits = p2p_waits(report.main_groups(), peers=peers)
    document = with_fr(request, report_document(report), live, waits)
    title = nodes_title(report.nodes)
    if target.jobid:
        title = f"SLURM job {target.jobid}, {title}"
    kept, shown = render_for(request, report, diagnosis, title, live=live, waits=waits)
    if request.out_dir is not None:
        write_node_files(
            request.out_dir,
            result.nodes,
            document,
            "stacks.json",
            extra={"report.txt": kept or ""},
            force=request.force,
        )
    dumped = sum(1 for p in report.processes if p.dumped)
    missing = not_found_here(report, diagnosis.missing_ranks)
    code = int(exit_code(len(result.nodes), dumped, report.failures, missing))
    if shown is None:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(shown, nl=False)
        if request.out_dir is not None:
            click.echo(
                f"\nper-node answers (NODE.out, NODE.err), stacks.json and report.txt: {request.out_dir}/",
                err=request.folded,  # --folded: stdout holds only folded lines
            )
    if stop.signum:
        click.echo(
            f"rankscope: interrupted by {stop.name}: the nodes that had not answered are listed", err=True
        )
        return stopped_exit_code(stop.signum)
    return code

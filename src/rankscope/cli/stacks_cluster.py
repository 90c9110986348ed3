"""The multi-node branch of `rankscope stacks` (--hosts, --hostfile, --jobid): collect, merge, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import click

if TYPE_CHECKING:  # the fan-out machinery is imported only when a multi-node run starts
    from rankscope.cluster.run import ClusterTarget
    from rankscope.cluster.stacks_remote import RemoteStacksOptions

REMOTE_RANKSCOPE_OPTION = click.option(
    "--remote-rankscope",
    metavar="PATH",
    default="rankscope",
    show_default=True,
    help="rankscope on the nodes (with --hosts/--hostfile/--jobid), e.g. ~/venv/bin/rankscope.",
)

EXAMPLES = """
\b
Many nodes (each runs `rankscope stacks --local --json`, this side merges):
  rankscope stacks --jobid 2180718                  # every node of a SLURM job, via srun
  rankscope stacks --hosts node-[5,8] --via pdsh    # a node set (ClusterShell syntax)
  rankscope stacks --hostfile hostfile --via ssh --remote-setup '. ~/.pdshrc'
  rankscope stacks --hosts gpu[001-040] --remote-rankscope /opt/venv/bin/rankscope --out traces/
Nodes that could not be read are listed last with the stage they reached:
unreachable, auth refused, no rankscope there, no job found, dump failed, timeout.
"""


def run_cluster_stacks(
    target: ClusterTarget,
    options: RemoteStacksOptions,
    as_json: bool,
    out_dir: Optional[Path],
    full: bool,
    color: Optional[bool],
) -> int:
    from rankscope.cli.progress import tty_progress
    from rankscope.cluster.output import write_node_files
    from rankscope.cluster.stacks_remote import stacks_remote
    from rankscope.cluster.targets import fold
    from rankscope.stacks.explain import diagnose
    from rankscope.stacks.render import render_text
    from rankscope.stacks.report import report_document

    progress = tty_progress()
    try:
        result = stacks_remote(target, options, progress)
    finally:
        if progress is not None:
            progress.clear()
    report = result.report
    diagnosis = report.diagnosis = diagnose(report)
    report.nodes = result.node_statuses()
    document = report_document(report)
    answered = result.answered
    title = f"{len(answered)} of {len(result.nodes)} nodes ({fold(answered) or 'none'})"
    if target.jobid:
        title = f"SLURM job {target.jobid}, {title}"
    text = render_text(report, diagnosis, full=full, color=False, title=title)
    if out_dir is not None:
        write_node_files(out_dir, result.nodes, document, "stacks.json", extra={"report.txt": text})
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        import sys

        use_color = sys.stdout.isatty() if color is None else color
        click.echo(
            render_text(report, diagnosis, full=full, color=True, title=title) if use_color else text,
            nl=False,
        )
        if out_dir is not None:
            click.echo(f"\nper-node answers (NODE.out, NODE.err), stacks.json and report.txt: {out_dir}/")
    return int(result.exit_code())

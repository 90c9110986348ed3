"""`rankscope exec`: run one command on every node and fold identical outputs (like clush -b)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.cluster_options import DEADLINE_OPTION, cluster_options, cluster_target
from rankscope.cli.nodefiles import write_node_files
from rankscope.cli.outcome import exit_code, stopped_exit_code
from rankscope.cli.outfiles import FORCE_OPTION, check_out_dir
from rankscope.cli.params import from_params
from rankscope.cli.progress import tty_progress
from rankscope.cluster.gather import render_groups, results_to_json
from rankscope.cluster.run import ClusterTarget, run_remote
from rankscope.errors import BadInputError
from rankscope.lifetime import StopSignals
from rankscope.model import Failure, Stage

HELP = """Run a command on every node; identical outputs are printed once under their folded node list.

\b
Examples:
  rankscope exec --hosts node[1-40] -- nvidia-smi -L
  rankscope exec --jobid 2180718 -- date
  rankscope exec --hostfile hostfile --via ssh -- 'ibstat | grep State'
  rankscope exec --hosts gpu[001-004] --json -- uptime

One CMD word is run by the node's shell as written (pipes allowed); several words are
quoted one by one. Nodes that fail are listed at the end with the stage they reached
(unreachable, auth refused, timeout, command failed). Exit code: 0 when every node ran
the command with status 0, 4 when some did not, 5 when none did (docs/exit-codes.md).
Ctrl-C or SIGTERM ends every node's command (here and on the node), prints what the
nodes gave so far (the others are "interrupted") and exits 130 or 143.
"""


@dataclass(frozen=True)
class ExecRequest:
    """Everything one `rankscope exec` command line asks for."""

    cluster: ClusterTarget
    command: tuple[str, ...]
    as_json: bool = False
    out_dir: Optional[Path] = None
    force: bool = False


@click.command("exec", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@cluster_options
@DEADLINE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (schema rankscope.exec/1).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Also keep NODE.out per node and exec.json here.",
)
@FORCE_OPTION
@click.argument("command", nargs=-1, required=True)
def exec_cmd(**params: Any) -> int:
    request = from_params(ExecRequest, params, cluster=cluster_target(params))
    if not request.command or not "".join(request.command).strip():
        raise BadInputError("no command given", "put it after --, e.g. rankscope exec --hosts n[1-2] -- date")
    check_out_dir(request.out_dir, request.force)
    command = request.command
    progress = tty_progress()
    try:
        with StopSignals() as stop:
            run_command = command[0] if len(command) == 1 else list(command)
            results = run_remote(request.cluster, run_command, progress, stop)
    finally:
        if progress is not None:
            progress.clear()
    document = results_to_json(results)
    if request.out_dir is not None:
        write_node_files(request.out_dir, results, document, "exec.json", force=request.force)
    if request.as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(render_groups(results), nl=False)
    if stop.signum:
        click.echo(
            f"rankscope: interrupted by {stop.name}: the nodes that had not answered are listed", err=True
        )
        return stopped_exit_code(stop.signum)
    failures = [Failure(r.node, Stage(r.stage), r.reason, r.hint) for r in results if not r.ok]
    return int(exit_code(len(results), len(results) - len(failures), failures))

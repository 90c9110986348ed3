"""`rankscope stacks`: where is every rank of a hung job, and which one is elsewhere.

The command line becomes one :class:`StacksRequest` (read by parameter name, see
:func:`read_request`); this node's run goes to rankscope.cli.stacks_report, a multi-node one to
rankscope.cli.stacks_cluster, which derives every node's command line from the same options.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from rankscope.cli.cluster_options import cluster_options, cluster_requested, cluster_target
from rankscope.cli.exit_help import epilog
from rankscope.cli.outfiles import FORCE_OPTION, check_out_dir
from rankscope.cli.params import from_params
from rankscope.cli.pictures import FOLDED_OPTION, HTML_OPTION, check_page_path
from rankscope.cli.stacks_cluster import EXAMPLES as CLUSTER_EXAMPLES
from rankscope.cli.stacks_cluster import REMOTE_RANKSCOPE_OPTION
from rankscope.cli.stacks_request import COUNTS, LOWEST_SECONDS, StacksRequest, run_here
from rankscope.stacks.options import NODE_ANSWER, StacksOptions
from rankscope.stacks.pyspy_cmd import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

__all__ = ["StacksRequest", "read_request", "stacks"]


def read_request(params: Mapping[str, Any]) -> StacksRequest:
    """The click parameters of `stacks`, by name, as one StacksRequest."""
    cluster = cluster_target(params) if cluster_requested(params) and not params["local"] else None
    return from_params(StacksRequest, params, options=from_params(StacksOptions, params), cluster=cluster)


HELP = """Dump every rank's Python stacks (py-spy) and say which ranks wait where.

With no target, finds the distributed job on this node (torchrun, deepspeed,
accelerate, mpirun, srun) and maps each worker to its rank. Ranks with the same
stack are merged into one tree with folded rank lists; the diagnosis names the
collective the majority waits in and the rank(s) that are elsewhere.

\b
Examples:
  rankscope stacks                          # the job on this node
  rankscope stacks --pid 4242               # a launcher (its workers) or one worker
  rankscope stacks --native                 # + C/C++ frames of 2 ranks per distinct stack
  rankscope stacks --native-all             # + C/C++ frames of every rank (0.5-1 s each)
  rankscope stacks --samples 3 --interval 2 # stuck or just slow? (stuck/moving per rank)
  rankscope stacks --json > stacks.json     # machine-readable (schema rankscope.stacks/1)
  rankscope stacks --out dumps/             # also keep every raw dump (private files)
  rankscope stacks --from dumps/            # re-analyse a saved --out directory, anywhere
  rankscope stacks --all-python             # every Python process of yours
  rankscope stacks --via-signal             # no ptrace: ranks started with RANKSCOPE_INPROC=1
  rankscope stacks --fr /tmp/fr/            # + the flight recorders' desync verdict
  rankscope stacks --no-fr                  # skip the live flight recorders (see below)
  rankscope stacks --html hang.html         # + one self-contained page with the pictures
  rankscope stacks --folded | flamegraph.pl > hang.svg   # collapsed stacks

Ranks started with RANKSCOPE_INPROC=1 are also asked for their PyTorch flight
recorders in the same pass (no code change in the job): the desync verdict
("rank 0 issued an extra all_reduce ... from f (train.py:22)") goes above the
stack groups, as with --fr.

Processes are grouped into jobs by evidence (launcher, TORCHELASTIC_RUN_ID,
MASTER_ADDR:MASTER_PORT, SLURM step, world size, owner). If several jobs run on
this node, each gets its own section (and jobs[] in --json); pick one with
--pid LAUNCHER_PID. A process with a rank that fits no job (RANK=0 WORLD_SIZE=1
under no launcher) is listed apart, not dumped (strays[] in --json).
"""


#: Options that collect: --from reads a saved run instead, so none of them applies to it.
COLLECTING = {
    "pids": "--pid",
    "all_python": "--all-python",
    "native": "--native",
    "native_all": "--native-all",
    "with_locals": "--locals",
    "slurm_job": "--slurm-job",
    "out_dir": "--out",
    "via_signal": "--via-signal",
}


#: --timeout and --deadline: seconds, at least 0.1, default shown in --help.
SECONDS: dict[str, Any] = {
    "type": click.FloatRange(LOWEST_SECONDS["timeout"]),
    "show_default": True,
    "metavar": "SECONDS",
}


@click.command(help=HELP + CLUSTER_EXAMPLES, epilog=epilog("stacks"))
@click.option(
    "--pid", "pids", type=int, multiple=True, metavar="PID", help="A launcher or worker pid (repeatable)."
)
@click.option(
    "--all-python", is_flag=True, help="Every Python process of yours (root: everyone's), not only jobs."
)
@click.option(
    "--native",
    is_flag=True,
    help="Include native (C/C++) frames: why a rank waits (c10d/NCCL, CUDA sync, futex). Python stacks of "
    "every rank first, then native dumps of the first 2 ranks of each distinct stack; the report names them.",
)
@click.option(
    "--native-all", is_flag=True, help="Like --native, but dump every rank natively (cost grows with ranks)."
)
@click.option(
    "--locals",
    "with_locals",
    is_flag=True,
    help="Collect local variables (kept in --json and --out); the flight-recorder verdict then names the "
    "peer (src/dst) of ranks waiting in recv/send.",
)
@click.option(
    "--via-signal",
    is_flag=True,
    help="Take the stacks through each rank's in-process handler (a request its own thread answers; no "
    "ptrace, no py-spy, no signal despite the name): for "
    "jobs started with RANKSCOPE_INPROC=1. Used by itself for ranks py-spy may not attach to. Python frames only.",
)
@click.option(
    "--samples",
    type=click.IntRange(*COUNTS["samples"]),
    default=1,
    show_default=True,
    metavar="N",
    help="Snapshots to take.",
)
@click.option(
    "--interval",
    type=click.FloatRange(LOWEST_SECONDS["interval"]),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between samples.",
)
@click.option("--timeout", default=DEFAULT_TIMEOUT, help="Deadline per process dump, seconds.", **SECONDS)
@click.option(
    "--deadline", default=DEFAULT_DEADLINE, help="Deadline for the whole collection, seconds.", **SECONDS
)
@click.option(
    "--jobs",
    "parallelism",
    type=click.IntRange(*COUNTS["parallelism"]),
    default=None,
    metavar="N",
    help="Dumps in parallel (default: 2 x CPUs, from 4 to 64).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema rankscope.stacks/1).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Also write raw dumps, stacks.json and report.txt here (mode 0700/0600).",
)
@FORCE_OPTION
@click.option(
    "--from",
    "from_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    default=None,
    help="Re-analyse a directory `stacks --out` wrote (here or on another machine) instead of collecting.",
)
@click.option(
    "--fr",
    type=click.Path(path_type=Path),
    metavar="DUMPS",
    default=None,
    help="Flight-recorder dumps (a directory or PREFIX, see `rankscope fr`): the desync verdict goes above "
    "the stack groups, and each group shows its last enqueued/completed collective.",
)
@click.option(
    "--no-fr",
    is_flag=True,
    help="Do not ask the ranks' in-process handlers (RANKSCOPE_INPROC=1) for their flight recorders. By "
    "default they are asked in the same pass as the stacks, and the desync verdict goes above the groups.",
)
@click.option("--full", is_flag=True, help="Show every frame (library frames are folded by default).")
@HTML_OPTION
@FOLDED_OPTION
@click.option("--local", is_flag=True, help="Only this node (the default without --hosts/--jobid).")
@click.option("--color/--no-color", default=None, help="Colour the text report (default: on a terminal).")
@cluster_options
@REMOTE_RANKSCOPE_OPTION
@click.option(
    "--node-python",
    is_flag=True,
    help="With nodes: every node runs rankscope's own Python command, not the POSIX sh collector "
    "(which sends /proc's files and py-spy's dumps, and hands over to rankscope there when it must).",
)
@click.option(
    NODE_ANSWER,
    "node_answer",
    is_flag=True,
    hidden=True,
    help="With --local --json: answer a multi-node run's head with the raw dumps (rankscope.stacks.node/1).",
)
@click.option(
    "--slurm-job",
    metavar="JOBID",
    hidden=True,
    help="Only processes of SLURM job JOBID on this node (what --jobid passes to every node).",
)
def stacks(**params: Any) -> int:
    request = read_request(params)
    if request.folded and request.as_json:
        raise click.UsageError(
            "--folded prints collapsed stacks instead of the report; --json cannot be used with it"
        )
    check_page_path(request.html)
    if request.from_dir is not None:
        refuse_with_from(params, request)
        from rankscope.cli.stacks_report import report_saved

        return report_saved(request)
    if request.options.via_signal:
        unusable = [
            flag
            for name, flag in COLLECTING.items()
            if name in ("native", "native_all", "with_locals") and params.get(name)
        ]
        if unusable:
            raise click.UsageError(
                f"--via-signal takes Python frames only; {', '.join(unusable)} cannot be used with it"
            )
    check_out_dir(request.out_dir, request.force)
    if request.cluster is not None:
        # Many nodes: each runs the sh collector (or rankscope there); see rankscope.cluster.stacks_remote.
        from rankscope.cli.stacks_cluster import run_cluster_stacks

        return run_cluster_stacks(request)
    return run_here(request)


def refuse_with_from(params: Mapping[str, Any], request: StacksRequest) -> None:
    """--from reads a saved run: an option that collects is a usage error, not silently ignored."""
    given = [flag for name, flag in COLLECTING.items() if params.get(name)]
    if request.options.samples != 1:
        given.append("--samples")
    if cluster_requested(params):
        given.append("--hosts/--hostfile/--jobid")
    if given:
        raise click.UsageError(f"--from reads a saved run; {', '.join(given)} cannot be used with it")

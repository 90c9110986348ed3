"""`rankscope stacks`: where is every rank of a hung job, and which one is elsewhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

from rankscope.cli.cluster_options import cluster_options, cluster_requested, pop_cluster_kwargs
from rankscope.cli.stacks_cluster import EXAMPLES as CLUSTER_EXAMPLES
from rankscope.cli.stacks_cluster import REMOTE_RANKSCOPE_OPTION
from rankscope.errors import ExitCode
from rankscope.stacks.explain import diagnose
from rankscope.stacks.local import StacksOptions, exit_code_for, run_local, save_outputs
from rankscope.stacks.pyspy_cmd import DEFAULT_TIMEOUT
from rankscope.stacks.render import render_text

HELP = """Dump every rank's Python stacks (py-spy) and say which ranks wait where.

With no target, finds the distributed job on this node (torchrun, deepspeed,
accelerate, mpirun, srun) and maps each worker to its rank. Ranks with the same
stack are merged into one tree with folded rank lists; the diagnosis names the
collective the majority waits in and the rank(s) that are elsewhere.

\b
Examples:
  rankscope stacks                          # the job on this node
  rankscope stacks --pid 4242               # a launcher (its workers) or one worker
  rankscope stacks --native                 # include C/C++ frames (slower)
  rankscope stacks --samples 3 --interval 2 # stuck or just slow? (stuck/moving per rank)
  rankscope stacks --json > stacks.json     # machine-readable (schema rankscope.stacks/1)
  rankscope stacks --out dumps/             # also keep every raw dump (private files)
  rankscope stacks --all-python             # every Python process of yours

Exit codes: 0 ok, 3 nothing found, 4 some targets failed, 5 all failed,
6 py-spy missing, 7 permission denied (see docs/exit-codes.md).
"""


def _progress_printer() -> Optional[Callable[[str], None]]:
    if not sys.stderr.isatty():
        return None

    def show(message: str) -> None:
        click.echo(f"\r\033[K{message}", err=True, nl=False)

    return show


@click.command(help=HELP + CLUSTER_EXAMPLES)
@click.option(
    "--pid", "pids", type=int, multiple=True, metavar="PID", help="A launcher or worker pid (repeatable)."
)
@click.option(
    "--all-python", is_flag=True, help="Every Python process of yours (root: everyone's), not only jobs."
)
@click.option(
    "--native", is_flag=True, help="Include native (C/C++) frames: slower, shows where in torch/NCCL."
)
@click.option(
    "--locals", "with_locals", is_flag=True, help="Collect local variables (kept in --json and --out)."
)
@click.option(
    "--samples", type=click.IntRange(1, 1000), default=1, show_default=True, help="Snapshots to take."
)
@click.option(
    "--interval", type=click.FloatRange(0), default=1.0, show_default=True, help="Seconds between samples."
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Deadline per process dump, seconds.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(0.1),
    default=60.0,
    show_default=True,
    help="Deadline for the whole collection, seconds.",
)
@click.option(
    "--jobs",
    "parallelism",
    type=click.IntRange(1, 256),
    default=None,
    help="Dumps in parallel (default: max(4, 2 x CPUs)).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema rankscope.stacks/1).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write raw dumps, stacks.json and report.txt here (mode 0700/0600).",
)
@click.option("--full", is_flag=True, help="Show every frame (library frames are folded by default).")
@click.option("--local", is_flag=True, help="Only this node (the default without --hosts/--jobid).")
@click.option("--color/--no-color", default=None, help="Colour the text report (default: on a terminal).")
@cluster_options
@REMOTE_RANKSCOPE_OPTION
@click.option("--slurm-job", metavar="J", help="Only processes of SLURM job J on this node (set by --jobid).")
def stacks(
    pids: tuple[int, ...],
    all_python: bool,
    native: bool,
    with_locals: bool,
    samples: int,
    interval: float,
    timeout: float,
    deadline: float,
    parallelism: Optional[int],
    as_json: bool,
    out_dir: Optional[Path],
    full: bool,
    local: bool,
    color: Optional[bool],
    remote_rankscope: str,
    slurm_job: Optional[str],
    **cluster: Any,
) -> int:
    if cluster_requested(cluster) and not local:
        target = pop_cluster_kwargs(cluster)
        # Many nodes: each runs `rankscope stacks --local --json`; see rankscope.cluster.stacks_remote.
        from rankscope.cli.stacks_cluster import run_cluster_stacks
        from rankscope.cluster.stacks_remote import RemoteStacksOptions

        target.overall_timeout = deadline
        remote = RemoteStacksOptions(
            remote_rankscope, pids, all_python, native, with_locals, samples, interval, timeout, deadline
        )
        if target.jobid:
            remote.extra += ["--slurm-job", target.jobid]
        return run_cluster_stacks(target, remote, as_json, out_dir, full, color)
    if slurm_job:
        from rankscope.cluster.slurm_local import slurm_job_pids

        pids = (*pids, *slurm_job_pids(slurm_job))
    options = StacksOptions(
        pids=pids,
        all_python=all_python,
        native=native,
        with_locals=with_locals,
        timeout=timeout,
        deadline=deadline,
        samples=samples,
        interval=interval,
        parallelism=parallelism,
    )
    progress = _progress_printer()
    result = run_local(options, progress=progress)
    if progress is not None:
        click.echo("\r\033[K", err=True, nl=False)
    report = result.report
    diagnosis = diagnose(report)
    document = report.to_dict(diagnosis=diagnosis.to_dict())
    text = render_text(report, diagnosis, full=full, color=False)
    code = exit_code_for(report)
    if code == ExitCode.NOTHING_FOUND and not as_json:
        click.echo(
            "rankscope: error: no distributed job found on this node (no torchrun/deepspeed/accelerate/mpirun/srun "
            "workers with a rank) — name a process with --pid PID, or use --all-python",
            err=True,
        )
        return int(code)
    if out_dir is not None:
        save_outputs(out_dir, result, document, text)
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        use_color = sys.stdout.isatty() if color is None else color
        click.echo(
            render_text(report, diagnosis, full=full, color=use_color) if use_color else text, nl=False
        )
        if out_dir is not None:
            click.echo(f"\nraw dumps, stacks.json and report.txt: {out_dir}/")
    if code in (ExitCode.ALL_FAILED, ExitCode.PERMISSION_DENIED, ExitCode.BAD_INPUT) and report.failures:
        first = report.failures[0]
        click.echo(f"rankscope: error: {first.target}: {first.reason} — {first.hint}", err=True)
    return int(code)

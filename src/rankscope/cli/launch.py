"""`rankscope launch SCRIPT [ARGS]`: ready-to-run commands for torchrun, SLURM, pdsh, mpirun, deepspeed."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode
from rankscope.launch.builders import build
from rankscope.launch.plan import Launcher, LaunchPlan, Prefix
from rankscope.launch.render import render_report
from rankscope.serial import dump_document

HELP = """Print ready-to-run commands that start SCRIPT on N nodes x G GPUs, for torchrun (one
command per node), a SLURM sbatch script (srun + torchrun, or srun per GPU), pdsh, mpirun and
deepspeed (with their hostfiles), every output line labelled [host:rank]. Nothing is run.

\b
Arguments after SCRIPT are passed to it exactly (spaces, quotes, $ included); put -- before them
when they start with a dash. The output is a shell script: files are written by heredocs.

\b
Examples:
  rankscope launch train.py --nodes 2 --gpus 8 --hosts node[1-2]
  rankscope launch train.py --format sbatch --nodes 4 --gpus 8 > job.sh && bash job.sh
  rankscope launch train.py --format mpirun --hostfile hostfile --gpus 4 -- --lr 3e-4 --name "run 1"
  rankscope launch train.py --format pdsh --hosts gpu[01-16] --gpus 8 --master-addr gpu01 --port 6000
  rankscope launch train.py --nodes 2 --gpus 8 --json
  rankscope launch train.py --format sbatch --nodes 4 --gpus 8 --watch   # + rankscope watch
"""

FORMATS = [launcher.value for launcher in Launcher] + ["all"]


@dataclass(frozen=True)
class LaunchRequest:
    script: str
    args: tuple[str, ...]
    nodes: Optional[int]
    gpus: int
    hosts: Optional[str]
    hostfile: Optional[Path]
    master_addr: Optional[str]
    port: int
    python: str
    torchrun: str
    workdir: Optional[str]
    prefix: str
    slurm_gpus: bool
    job_name: str
    format: str
    as_json: bool
    watch: bool = False


def _hosts(request: LaunchRequest) -> tuple[str, ...]:
    from rankscope.cluster.targets import expand_nodeset, parse_hostfile

    if request.hosts and request.hostfile:
        raise BadInputError("--hosts and --hostfile both given", "name the nodes one way")
    if request.hosts:
        return tuple(expand_nodeset(request.hosts))
    if request.hostfile:
        return tuple(parse_hostfile(request.hostfile))
    return ()


#: SLURM job name / rendezvous id: it lands in an #SBATCH line, so no spaces or newlines.
_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
#: A host name, an IPv4 or an IPv6 address.
_ADDRESS = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]*|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$")


def _torchrun_argv(text: str) -> tuple[str, ...]:
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise BadInputError(f"cannot read --torchrun {text!r}: {exc}", "quote it as in a shell") from None
    if not argv:
        raise BadInputError(
            "--torchrun is empty", "pass torchrun, a path, or 'python3 -m torch.distributed.run'"
        )
    return argv


def plan_of(request: LaunchRequest) -> LaunchPlan:
    if not _JOB_NAME.match(request.job_name):
        raise BadInputError(f"bad --job-name {request.job_name!r}", "use letters, digits, '.', '-', '_'")
    if request.master_addr is not None and not _ADDRESS.match(request.master_addr):
        raise BadInputError(f"bad --master-addr {request.master_addr!r}", "pass a host name or an IP address")
    hosts = _hosts(request)
    nodes = request.nodes if request.nodes is not None else (len(hosts) or 1)
    if hosts and len(hosts) != nodes:
        raise BadInputError(
            f"--nodes {nodes} but {len(hosts)} host(s) named",
            "leave out --nodes (it follows the hosts) or name as many hosts as nodes",
        )
    return LaunchPlan(
        script=request.script,
        args=request.args,
        nodes=nodes,
        gpus=request.gpus,
        hosts=hosts,
        master_addr=request.master_addr,
        port=request.port,
        python=request.python,
        torchrun=_torchrun_argv(request.torchrun),
        workdir=request.workdir if request.workdir is not None else os.getcwd(),
        prefix=Prefix(request.prefix),
        slurm_gpus=request.slurm_gpus,
        job_name=request.job_name,
        watch=request.watch,
    )


@click.command(help=HELP, context_settings={"ignore_unknown_options": False})
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="Number of nodes [the hosts named, else 1].",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=1),
    metavar="N",
    default=1,
    show_default=True,
    help="Processes (GPUs) per node.",
)
@click.option(
    "--hosts", default=None, metavar="NODESET", help="Node names in node-rank order: node[1-4] or a,b."
)
@click.option(
    "--hostfile",
    type=click.Path(path_type=Path),
    metavar="FILE",
    default=None,
    help="Read node names from a hostfile (host slots=N, host:N or host per line).",
)
@click.option("--master-addr", default=None, metavar="HOST", help="Rendezvous host [the first node].")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    default=29500,
    show_default=True,
    help="Rendezvous port.",
)
@click.option(
    "--python",
    default="python3",
    metavar="PROGRAM",
    show_default=True,
    help="Interpreter for launchers that start python.",
)
@click.option(
    "--torchrun",
    default="torchrun",
    metavar="COMMAND",
    show_default=True,
    help="How to start torchrun on the nodes: a path, or 'python3 -m torch.distributed.run'.",
)
@click.option(
    "--workdir",
    default=None,
    metavar="DIR",
    help="Directory the job runs in on every node [the current one].",
)
@click.option(
    "--prefix",
    type=click.Choice([p.value for p in Prefix]),
    default=Prefix.NATIVE.value,
    show_default=True,
    help="Line labels: the launcher's own flags, `rankscope prefix`, or none.",
)
@click.option(
    "--slurm-gpus/--no-slurm-gpus",
    default=True,
    show_default=True,
    help="Ask SLURM for the GPUs (#SBATCH --gpus-per-node).",
)
@click.option(
    "--job-name",
    default="rankscope-job",
    metavar="NAME",
    show_default=True,
    help="SLURM job name and torchrun rendezvous id.",
)
@click.option(
    "--format",
    type=click.Choice(FORMATS),
    default="all",
    show_default=True,
    help="Which launcher's commands to print.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="sbatch scripts: run the step under `rankscope watch --jobid` with #SBATCH --signal=B:USR1@120, "
    "so a stall, a dead rank or a job near its time limit leaves a capture (docs/watch.md).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.launch document.")
def launch(**params: Any) -> int:
    request = from_params(LaunchRequest, params)
    plan = plan_of(request)
    launchers = list(Launcher) if request.format == "all" else [Launcher(request.format)]
    report = build(plan, launchers)
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_report(report), nl=False)
    return ExitCode.OK

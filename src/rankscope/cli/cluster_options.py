"""The node-targeting options shared by `rankscope exec` and `rankscope stacks`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import click

from rankscope.cluster import TRANSPORTS

if TYPE_CHECKING:  # imported on use: a local `rankscope stacks` never needs the fan-out machinery
    from rankscope.cluster.run import ClusterTarget

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--hosts", "-w", metavar="NODESET", help="Nodes in ClusterShell syntax: node[1-4,7], gpu[001-040]."
    ),
    click.option(
        "--hostfile",
        type=click.Path(path_type=Path),
        help="Hostfile: 'host slots=8' (DeepSpeed/Open MPI), 'host:8' (MPICH/Intel) or 'host' per line.",
    ),
    click.option(
        "--jobid", metavar="J", help="A running SLURM job: its nodes, reached with srun inside the job."
    ),
    click.option(
        "--via",
        type=click.Choice(TRANSPORTS),
        help="Transport. Default: srun with --jobid, else pdsh when installed, else ssh.",
    ),
    click.option(
        "--remote-setup",
        metavar="SHELL",
        default="",
        help="Shell text run on each node first, e.g. '. ~/.pdshrc' or 'conda activate env'.",
    ),
    click.option(
        "--fanout", type=click.IntRange(1, 1024), default=32, show_default=True, help="Nodes at once."
    ),
    click.option(
        "--node-timeout",
        type=click.FloatRange(0.5),
        default=30.0,
        show_default=True,
        help="Seconds one node may take before it is reported and dropped.",
    ),
    click.option(
        "--ssh-config", type=click.Path(path_type=Path), help="ssh config file (ssh -F); default: yours."
    ),
    click.option(
        "--ssh-option", "ssh_options", multiple=True, metavar="OPT", help="Extra ssh -o option (repeatable)."
    ),
    click.option(
        "--insecure-no-host-key-check",
        is_flag=True,
        help="Do not check node host keys (StrictHostKeyChecking=no). Only on a network you trust.",
    ),
]


#: `exec` has its own overall deadline; `stacks` already has --deadline and reuses it.
DEADLINE_OPTION = click.option(
    "--deadline",
    "overall_timeout",
    type=click.FloatRange(0.5),
    help="Seconds for all nodes together (default: none).",
)


def cluster_options(func: F) -> F:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def cluster_target(
    hosts: Optional[str],
    hostfile: Optional[Path],
    jobid: Optional[str],
    via: Optional[str],
    remote_setup: str,
    fanout: int,
    node_timeout: float,
    overall_timeout: Optional[float],
    ssh_config: Optional[Path],
    ssh_options: tuple[str, ...],
    insecure_no_host_key_check: bool,
) -> ClusterTarget:
    from rankscope.cluster.run import ClusterTarget
    from rankscope.cluster.transports import SshOptions

    ssh = SshOptions(
        config_file=str(ssh_config) if ssh_config else None,
        options=tuple(ssh_options),
        # Below 10 s, ssh's own ConnectTimeout would race our deadline: let the deadline decide.
        connect_timeout=10.0 if node_timeout > 10.0 else node_timeout + 1.0,
        insecure_no_host_key_check=insecure_no_host_key_check,
    )
    return ClusterTarget(
        hosts=hosts,
        hostfile=hostfile,
        jobid=jobid,
        via=via,
        remote_setup=remote_setup,
        fanout=fanout,
        node_timeout=node_timeout,
        overall_timeout=overall_timeout,
        ssh=ssh,
    )


def cluster_requested(kwargs: dict[str, Any]) -> bool:
    """True when the command line names nodes (--hosts, --hostfile or --jobid)."""
    return bool(kwargs.get("hosts") or kwargs.get("hostfile") or kwargs.get("jobid"))


def pop_cluster_kwargs(kwargs: dict[str, Any]) -> ClusterTarget:
    names = (
        "hosts",
        "hostfile",
        "jobid",
        "via",
        "remote_setup",
        "fanout",
        "node_timeout",
        "overall_timeout",
        "ssh_config",
        "ssh_options",
        "insecure_no_host_key_check",
    )
    return cluster_target(*(kwargs.pop(name, None) for name in names))

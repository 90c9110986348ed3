"""The node-targeting options shared by `rankscope exec` and `rankscope stacks`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from rankscope.cli.params import from_params
from rankscope.cluster import TRANSPORTS

if TYPE_CHECKING:  # imported on use: a local `rankscope stacks` never needs the fan-out machinery
    from rankscope.cluster.run import ClusterTarget

F = TypeVar("F", bound=Callable[..., Any])
N = TypeVar("N", bound="NodeOptions")


class NodeOptions(Protocol):
    """An options dataclass a node's command line is derived from (`StacksOptions`, `WhyOptions`)."""

    @property
    def slurm_job(self) -> Any: ...

    def for_node(self: N, node_timeout: float) -> N: ...

    def to_argv(self) -> list[str]: ...


def node_argv(remote_rankscope: str, options: NodeOptions, cluster: ClusterTarget) -> list[str]:
    """The command line every node of a multi-node run gets: the options made to answer before the
    per-node deadline, the SLURM job named when the nodes are a job's."""
    for_node = options.for_node(cluster.node_timeout)
    if cluster.jobid:
        for_node = replace(for_node, slurm_job=cluster.jobid)  # type: ignore[type-var]
    return [remote_rankscope, *for_node.to_argv()]


_OPTIONS = [
    click.option(
        "--hosts", "-w", metavar="NODESET", help="Nodes in ClusterShell syntax: node[1-4,7], gpu[001-040]."
    ),
    click.option(
        "--hostfile",
        type=click.Path(path_type=Path),
        metavar="FILE",
        help="Hostfile: 'host slots=8' (DeepSpeed/Open MPI), 'host:8' (MPICH/Intel) or 'host' per line.",
    ),
    click.option(
        "--jobid", metavar="JOBID", help="A running SLURM job: its nodes, reached with srun inside the job."
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
        "--fanout",
        type=click.IntRange(1, 1024),
        default=32,
        show_default=True,
        metavar="N",
        help="Nodes at once.",
    ),
    click.option(
        "--node-timeout",
        type=click.FloatRange(0.5),
        default=30.0,
        show_default=True,
        metavar="SECONDS",
        help="Seconds one node may take before it is reported and dropped.",
    ),
    click.option(
        "--ssh-config",
        type=click.Path(path_type=Path),
        metavar="FILE",
        help="ssh config file (ssh -F); default: yours.",
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
    metavar="SECONDS",
    help="Seconds for all nodes together (default: none).",
)


def cluster_options(func: F) -> F:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def cluster_requested(params: Mapping[str, Any]) -> bool:
    """True when the command line names nodes (--hosts, --hostfile or --jobid)."""
    return bool(params.get("hosts") or params.get("hostfile") or params.get("jobid"))


def cluster_target(params: Mapping[str, Any]) -> ClusterTarget:
    """The node-targeting options as one ClusterTarget, read by name from click's parameters.

    Each ClusterTarget field comes from the parameter of the same name (one a verb lacks keeps its
    default: `stacks` has no overall deadline option); the ssh flags become its SshOptions.
    """
    from rankscope.cluster.run import ClusterTarget
    from rankscope.cluster.transports import SshOptions

    node_timeout = params["node_timeout"]
    ssh = SshOptions(
        config_file=str(params["ssh_config"]) if params["ssh_config"] else None,
        options=tuple(params["ssh_options"]),
        # Below 10 s, ssh's own ConnectTimeout would race our deadline: let the deadline decide.
        connect_timeout=10.0 if node_timeout > 10.0 else node_timeout + 1.0,
        insecure_no_host_key_check=params["insecure_no_host_key_check"],
    )
    return from_params(ClusterTarget, params, ssh=ssh)

"""From "these nodes, this transport" to per-node results: the one entry point the verbs use."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rankscope.cluster.classify import NodeResult
from rankscope.cluster.fanout import run_on_nodes, run_srun_step
from rankscope.cluster.targets import expand_nodeset, parse_hostfile, slurm_job_nodes
from rankscope.cluster.transports import PdshTransport, SrunStep, SshOptions, SshTransport, remote_script
from rankscope.errors import BadInputError
from rankscope.lifetime import StopSignals


@dataclass(frozen=True)
class ClusterTarget:
    """Where to run (one of hosts, hostfile, jobid) and how (via, options, deadlines)."""

    hosts: Optional[str] = None
    hostfile: Optional[Path] = None
    jobid: Optional[str] = None
    via: Optional[str] = None
    remote_setup: str = ""
    fanout: int = 32
    node_timeout: float = 30.0
    overall_timeout: Optional[float] = None
    ssh: SshOptions = field(default_factory=SshOptions)

    def nodes(self) -> list[str]:
        chosen = [name for name, value in (("--hosts", self.hosts), ("--hostfile", self.hostfile)) if value]
        if len(chosen) > 1:
            raise BadInputError("--hosts and --hostfile are exclusive", "pass one of them")
        if self.hosts:
            return expand_nodeset(self.hosts)
        if self.hostfile:
            return parse_hostfile(self.hostfile)
        if self.jobid:
            return list(slurm_job_nodes(self.jobid).nodes)
        raise BadInputError("no nodes given", "pass --hosts NODESET, --hostfile FILE or --jobid J")

    def transport_name(self) -> str:
        if self.via:
            if self.via == "srun" and not self.jobid:
                raise BadInputError("--via srun needs --jobid", "pass the SLURM job id to attach to")
            return self.via
        if self.jobid and not (self.hosts or self.hostfile):
            return "srun"
        return "pdsh" if shutil.which("pdsh") else "ssh"


def run_remote(
    target: ClusterTarget,
    command: str | Sequence[str],
    progress: Optional[Callable[[str], None]] = None,
    stop: Optional[StopSignals] = None,
    on_result: Optional[Callable[[NodeResult], NodeResult]] = None,
) -> list[NodeResult]:
    """Run ``command`` on every node of ``target``; one NodeResult per node, in node order.

    ``progress`` is told ``"12/40 nodes"`` as nodes end (ssh and pdsh; an srun step ends at once);
    each node's result goes through ``on_result`` as it ends (its reading, while the others run).
    ``stop``: SIGINT/SIGTERM recorded by the caller end the run early (nodes ``interrupted``).
    Over ssh and pdsh the remote command dies with the connection (``remote_script``'s watcher).
    """
    nodes = target.nodes()
    via = target.transport_name()
    script = remote_script(command, target.remote_setup, watch_stdin=via != "srun")
    deadline = (
        target.node_timeout
        if target.overall_timeout is None
        else min(target.node_timeout, target.overall_timeout)
    )
    if via == "srun":
        assert target.jobid is not None
        step = SrunStep(target.jobid)
        step.check()
        results = run_srun_step(step, nodes, script, timeout=deadline, stop=stop)
        return [on_result(r) for r in results] if on_result is not None else results
    transport: SshTransport | PdshTransport
    if via == "pdsh":
        transport = PdshTransport(target.ssh, command_timeout=target.node_timeout)
    else:
        transport = SshTransport(target.ssh)
    transport.check()
    return run_on_nodes(
        transport,
        nodes,
        script,
        fanout=target.fanout,
        node_timeout=target.node_timeout,
        overall_timeout=target.overall_timeout,
        progress=progress,
        stop=stop,
        on_result=on_result,
    )

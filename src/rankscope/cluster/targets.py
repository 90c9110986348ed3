"""Which nodes to talk to: a ClusterShell node set, a hostfile, or the nodes of a SLURM job.

Every name that leaves this module has passed :func:`check_node_name`: a node name ends up
as an argument of ssh, pdsh or srun, so anything that looks like an option or carries shell
metacharacters is refused here, before any process starts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rankscope.errors import BadInputError, MissingToolError, NothingFoundError, RankscopeError
from rankscope.folding import fold_hosts

#: Host names and IPv4 addresses; optionally ``user@``. No leading dash (it would read as an option).
_NODE_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]*@)?[A-Za-z0-9_][A-Za-z0-9._-]*$")
#: ``host slots=8`` (DeepSpeed, Open MPI), ``host:8`` (MPICH, Intel MPI), or a bare ``host``.
_HOSTFILE_LINE = re.compile(
    r"^(?P<host>[^\s:]+)(?::(?P<mpich_slots>\d+))?(?P<rest>(?:\s+[A-Za-z_]+=\S*)*)\s*$"
)


def check_node_name(name: str) -> str:
    """Return ``name`` unchanged if it is a plausible host name; raise BadInputError if not."""
    if not _NODE_NAME.match(name):
        raise BadInputError(
            f"refusing node name {name!r}: not a host name",
            "use letters, digits, '.', '-', '_' (and one 'user@'), not starting with '-'",
        )
    return name


def fold(nodes: Iterable[str]) -> str:
    """``["node1", "node2", "node4"]`` -> ``"node[1-2,4]"`` (ClusterShell's notation)."""
    return fold_hosts(nodes)


def expand_nodeset(text: str) -> list[str]:
    """Expand ClusterShell syntax (``node-[5,8]``, ``gpu[001-040]``, ``a,b``) into checked names."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    try:
        names = list(NodeSet(text.strip()))
    except (NodeSetException, ValueError) as exc:
        raise BadInputError(
            f"cannot read node set {text!r}: {exc}", "use ClusterShell syntax such as node[1-4,7] or a,b"
        ) from exc
    if not names:
        raise BadInputError(f"node set {text!r} names no node", "pass --hosts node[1-4] or a comma list")
    return [check_node_name(name) for name in names]


def parse_hostfile(path: Path) -> list[str]:
    """Read a DeepSpeed/Open MPI (``host slots=8``), MPICH/Intel (``host:8``) or plain hostfile.

    Comments (``#``) and blank lines are skipped; duplicate hosts are kept once, in file order.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read hostfile {path}: {exc}", "pass a readable text file") from exc
    nodes: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _HOSTFILE_LINE.match(line)
        if match is None or not _NODE_NAME.match(match["host"]):
            raise BadInputError(
                f"{path}:{number}: cannot read hostfile line {raw.strip()!r}",
                "expected 'host slots=N', 'host:N' or 'host' per line",
            )
        _check_slots(path, number, match["rest"].split())
        host = match["host"]
        if host not in nodes:
            nodes.append(host)
    if not nodes:
        raise BadInputError(f"hostfile {path} names no host", "one host per line: 'host slots=8' or 'host:8'")
    return nodes


def _check_slots(path: Path, number: int, options: list[str]) -> None:
    """``slots=N`` and ``max_slots=N`` must be whole numbers of at least 1 (the launchers' own rule)."""
    for option in options:
        key, _, value = option.partition("=")
        if key in ("slots", "max_slots") and not (value.isascii() and value.isdigit() and int(value) >= 1):
            raise BadInputError(
                f"{path}:{number}: {option!r} is not a whole number of slots",
                "write 'host slots=N' with N >= 1 (the processes to start on that host)",
            )


@dataclass(frozen=True)
class SlurmJob:
    jobid: str
    state: str
    nodes: tuple[str, ...]

    @property
    def nodelist(self) -> str:
        return fold(self.nodes)


def _slurm_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(
            name, "run on a SLURM login node, or pass --hosts / --hostfile with --via ssh|pdsh"
        )
    return path


def _run_slurm(
    argv: Sequence[str], timeout: float, env: Optional[dict[str, str]]
) -> subprocess.CompletedProcess[str]:
    import tempfile

    from rankscope import lifetime

    with tempfile.TemporaryFile() as errors:  # apart from stdout: the reason a lookup failed
        done = lifetime.run(list(argv), timeout, env=env, stderr=errors)
        if done.timed_out:
            raise RankscopeError(
                f"{argv[0]} did not answer within {timeout:g}s", "is slurmctld up? try `sinfo`"
            )
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    return subprocess.CompletedProcess(list(argv), done.returncode or 0, done.text(), stderr)


def slurm_job_nodes(jobid: str, timeout: float = 15.0, env: Optional[dict[str, str]] = None) -> SlurmJob:
    """The nodes of a running SLURM job: ``squeue`` (state, node list), ``scontrol show hostnames``."""
    if not re.fullmatch(r"[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?", jobid):
        raise BadInputError(
            f"{jobid!r} is not a SLURM job id", "pass the number squeue shows, e.g. --jobid 2180718"
        )
    squeue = _slurm_tool("squeue")
    proc = _run_slurm([squeue, "-h", "-j", jobid, "-o", "%T|%N"], timeout, env)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "squeue lists no such job"
        raise NothingFoundError(
            f"SLURM job {jobid} not found: {reason}", "check the id with `squeue -u $USER`"
        )
    state, _, nodelist = lines[0].partition("|")
    if state != "RUNNING":
        raise NothingFoundError(
            f"SLURM job {jobid} is {state}, not RUNNING", "stacks can only be taken from a running job"
        )
    scontrol = _slurm_tool("scontrol")
    proc = _run_slurm([scontrol, "show", "hostnames", nodelist], timeout, env)
    nodes = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not nodes:
        raise RankscopeError(
            f"cannot expand node list {nodelist!r} of job {jobid}: {proc.stderr.strip()}",
            "check `scontrol show hostnames` works here",
        )
    return SlurmJob(jobid=jobid, state=state, nodes=tuple(check_node_name(n) for n in nodes))

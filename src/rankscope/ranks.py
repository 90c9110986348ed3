"""Who is this process? Derive a :class:`RankId` from a launcher's environment.

Works on the current process (``os.environ``) or any process on this node
(``/proc/PID/environ``, read by rankscope.procfs). Imported inside training processes:
Python 3.9, stdlib only.

Precedence, most specific first: the torch variables (what ``torch.distributed`` uses,
set by torchrun, DeepSpeed and accelerate), then Open MPI, then MPICH/Intel MPI/PMI/PMIx,
then SLURM. Under ``srun torchrun ...`` a worker has both ``RANK`` and ``SLURM_PROCID``;
``RANK`` is the one the user means.
"""

from __future__ import annotations

import os

#: typing and collections.abc cost milliseconds to import; the annotations do not need them at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Optional

    from rankscope.model import RankId

# (rank, local rank, world size, node rank, local world size) variable names per family.
_TORCH = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE")
_OPENMPI = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
_MVAPICH = (
    "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_SIZE",
    "",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)
_PMI = ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "", "MPI_LOCALNRANKS")
_PMIX = ("PMIX_RANK", "", "", "", "")
_SLURM = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID", "")

_FAMILIES = (
    ("torch", _TORCH),
    ("openmpi", _OPENMPI),
    ("mvapich", _MVAPICH),
    ("mpich", _PMI),
    ("pmix", _PMIX),
    ("slurm", _SLURM),
)

#: Variables whose presence alone says "this process belongs to a distributed job".
RANK_VARIABLES = tuple(names[0] for _, names in _FAMILIES)

#: Every variable :func:`rank_from_env` and :func:`launcher_of` read by name (launcher_of also reads
#: any ``ACCELERATE_*``): what another node must send for its ranks to be read here
#: (rankscope.stacks.shell_node).
ENV_VARIABLES = tuple(
    dict.fromkeys(
        [name for _, names in _FAMILIES for name in names if name]
        + ["NODE_RANK", "CROSS_RANK", "LOCAL_SIZE", "DS_ACCELERATOR", "SLURMD_NODENAME"]
        + ["TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "SLURM_STEP_ID"]
    )
)


def _int(env: Mapping[str, str], name: str) -> Optional[int]:
    if not name:
        return None
    value = env.get(name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def _first_int(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = _int(env, name)
        if value is not None:
            return value
    return None


def launcher_of(env: Mapping[str, str]) -> str:
    """Name the launcher that started a process, from the traces it leaves in the environment."""
    if any(key.startswith("ACCELERATE_") for key in env):
        return "accelerate"
    # DeepSpeed's per-node launcher sets these beside RANK; torchrun does not.
    if "RANK" in env and ("CROSS_RANK" in env or "DS_ACCELERATOR" in env or "LOCAL_SIZE" in env):
        return "deepspeed"
    if "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env:
        return "torchrun"
    if "OMPI_COMM_WORLD_RANK" in env:
        return "mpirun"
    if "MV2_COMM_WORLD_RANK" in env:
        return "mpirun"
    if "PMI_RANK" in env or "PMIX_RANK" in env:
        return "srun" if "SLURM_STEP_ID" in env and "PMI_RANK" not in env else "mpiexec"
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return "srun"
    if "RANK" in env:
        return "env"
    return "none"


def rank_from_env(env: Mapping[str, str], host: Optional[str] = None) -> RankId:
    """Build a :class:`RankId` from an environment mapping.

    ``host`` defaults to SLURM's node name when set, else this machine's short hostname.
    Missing variables stay ``None``; nothing is guessed.
    """
    from rankscope.model import RankId

    if host is None:
        host = env.get("SLURMD_NODENAME") or short_hostname()
    launcher = launcher_of(env)
    for _family, (rank_v, local_v, size_v, node_v, local_size_v) in _FAMILIES:
        rank = _int(env, rank_v)
        if rank is None:
            continue
        node_rank = _first_int(env, node_v, *(("NODE_RANK", "CROSS_RANK") if _family == "torch" else ()))
        local_size = _first_int(env, local_size_v, *(("LOCAL_SIZE",) if _family == "torch" else ()))
        return RankId(
            host=host,
            rank=rank,
            local_rank=_int(env, local_v),
            world_size=_int(env, size_v),
            node_rank=node_rank,
            local_world_size=local_size,
            launcher=launcher,
        )
    return RankId(host=host, launcher=launcher)


#: Where launchers say how many nodes a job has (torchrun's PET_NNODES may read "MIN:MAX").
NNODES_VARIABLES = (
    "PET_NNODES",
    "NNODES",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "GROUP_WORLD_SIZE",
    "OMPI_MCA_orte_num_nodes",
)


def spans_nodes(env: Mapping[str, str]) -> bool:
    """Whether the launcher's environment says the job spans several nodes.

    The node count where a launcher gives it, else a world larger than this node's share of it
    (WORLD_SIZE > LOCAL_WORLD_SIZE, or the same pair of another launcher family).
    """
    for name in NNODES_VARIABLES:
        value = env.get(name, "").split(":")[-1].strip()
        if value.isdigit():
            return int(value) > 1
    for _family, (_rank, _local, size_v, _node, local_size_v) in _FAMILIES:
        world, local = _int(env, size_v), _int(env, local_size_v)
        if world is not None and local is not None:
            return world > local
    return False


def short_hostname() -> str:
    """``hostname -s``: the name up to the first dot."""
    return os.uname().nodename.split(".", 1)[0]


def rank_of_pid(pid: int, host: Optional[str] = None) -> RankId:
    """The :class:`RankId` of a process on this node, from /proc/PID/environ.

    Raises ``OSError`` (``FileNotFoundError``, ``PermissionError``) as the kernel does.
    """
    from rankscope.procfs import environ  # training processes only ever ask about themselves

    return rank_from_env(environ(pid), host=host)


def current_rank() -> RankId:
    """The :class:`RankId` of the calling process."""
    return rank_from_env(os.environ)

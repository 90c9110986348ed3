"""Rank identity from each launcher's environment."""

from __future__ import annotations

import pytest

from rankscope.ranks import launcher_of, rank_from_env


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (  # torchrun / torch elastic
            {
                "RANK": "5",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "8",
                "GROUP_RANK": "2",
                "LOCAL_WORLD_SIZE": "2",
                "ROLE_RANK": "5",
                "TORCHELASTIC_RUN_ID": "none",
                "TORCHELASTIC_RESTART_COUNT": "0",
            },
            (5, 1, 8, 2, 2, "torchrun"),
        ),
        (  # srun launching python directly
            {
                "SLURM_PROCID": "13",
                "SLURM_LOCALID": "5",
                "SLURM_NTASKS": "16",
                "SLURM_NODEID": "1",
                "SLURM_STEP_ID": "0",
            },
            (13, 5, 16, 1, None, "srun"),
        ),
        (  # Open MPI
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_NODE_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "PMIX_RANK": "3",
            },
            (3, 1, 4, 1, 2, "mpirun"),
        ),
        (  # MPICH / Intel MPI (Hydra)
            {"PMI_RANK": "6", "PMI_SIZE": "8", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"},
            (6, 2, 8, None, 4, "mpiexec"),
        ),
        (  # DeepSpeed's launcher
            {
                "RANK": "9",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "16",
                "CROSS_RANK": "1",
                "CROSS_SIZE": "2",
                "LOCAL_SIZE": "8",
            },
            (9, 1, 16, 1, 8, "deepspeed"),
        ),
        (  # accelerate launch (torchrun underneath)
            {
                "RANK": "0",
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "2",
                "ACCELERATE_MIXED_PRECISION": "bf16",
                "TORCHELASTIC_RUN_ID": "none",
            },
            (0, 0, 2, None, None, "accelerate"),
        ),
        (  # torchrun inside srun: the torch rank wins over the SLURM task id
            {
                "RANK": "12",
                "LOCAL_RANK": "4",
                "WORLD_SIZE": "16",
                "GROUP_RANK": "1",
                "TORCHELASTIC_RUN_ID": "j",
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_STEP_ID": "0",
            },
            (12, 4, 16, 1, None, "torchrun"),
        ),
    ],
)
def test_rank_from_launcher_env(env: dict[str, str], expected: tuple[object, ...]) -> None:
    rank = rank_from_env(env, host="node7")
    got = (rank.rank, rank.local_rank, rank.world_size, rank.node_rank, rank.local_world_size, rank.launcher)
    assert got == expected
    assert rank.label == f"node7:{expected[0]}"


def test_no_launcher_gives_no_rank() -> None:
    rank = rank_from_env({"HOME": "/root"}, host="h")
    assert rank.rank is None and rank.launcher == "none" and rank.label == "h"


def test_garbage_values_are_ignored_not_guessed() -> None:
    rank = rank_from_env({"RANK": "three", "SLURM_PROCID": "4"}, host="h")
    assert rank.rank == 4  # RANK unusable, the next launcher's variable is used


def test_slurm_node_name_is_the_host() -> None:
    rank = rank_from_env({"SLURM_PROCID": "0", "SLURMD_NODENAME": "gpu017"})
    assert rank.host == "gpu017"


def test_launcher_of_plain_env() -> None:
    assert launcher_of({"RANK": "0"}) == "env"


def test_a_job_spans_nodes_by_its_node_count_or_a_world_beyond_the_local_world() -> None:
    from rankscope.ranks import spans_nodes

    assert spans_nodes({"NNODES": "2"})
    assert spans_nodes({"PET_NNODES": "1:4"})  # torchrun's elastic MIN:MAX
    assert spans_nodes({"SLURM_NNODES": "4"})
    assert spans_nodes({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert spans_nodes({"OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"})
    assert not spans_nodes({"NNODES": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert not spans_nodes({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"})
    assert not spans_nodes({"WORLD_SIZE": "8"})
    assert not spans_nodes({})

"""`why` on logs whose evidence names no rank of the job: Open MPI's MPI_ABORT report (its rank), a Ray
worker's crash (its pid)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here

CORPUS = Path(__file__).resolve().parent.parent / "logs" / "corpus" / "logs"


def test_the_rank_that_called_mpi_abort_is_the_verdict() -> None:
    verdict = run_cli_here("why", "--log", str(CORPUS / "mpi_abort_only.log"), "--json").json()["verdict"]
    assert verdict["text"] == "rank 1 called MPI_ABORT (Open MPI then killed every process)", verdict
    assert verdict["ranks"] == [1]


def test_a_process_that_is_no_rank_is_named_before_its_evidence() -> None:
    """A Ray worker's crash (its pid, no rank): the verdict says whose it is."""
    verdict = run_cli_here("why", "--log", str(CORPUS / "ray_vllm_segv_prefixed.log"), "--json").json()[
        "verdict"
    ]
    assert verdict["text"] == "pid=51878: its faulthandler dump: Fatal Python error: Segmentation fault", (
        verdict
    )

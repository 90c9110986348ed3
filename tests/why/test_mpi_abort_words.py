"""`why` on a log whose only evidence is Open MPI's MPI_ABORT report names the rank that aborted."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli_here

CORPUS = Path(__file__).resolve().parent.parent / "logs" / "corpus" / "logs"


def test_the_rank_that_called_mpi_abort_is_the_verdict() -> None:
    verdict = run_cli_here("why", "--log", str(CORPUS / "mpi_abort_only.log"), "--json").json()["verdict"]
    assert verdict["text"] == "rank 1 called MPI_ABORT (Open MPI then killed every process)", verdict
    assert verdict["ranks"] == [1]

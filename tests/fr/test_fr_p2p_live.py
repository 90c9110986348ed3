"""A hung gloo pipeline (tests/fr/fr_job.py ``pipeline``, 3 ranks, torch 2.13, TORCH_FR_BUFFER_SIZE=2000
RANKSCOPE_INPROC=1): rank 0 never sends its activations and waits in a barrier; ranks 1-2 wait in
``recv`` from the stage before them. gloo records no send/recv, so the recorders alone say only that
ranks 1-2 never issued the barrier; `rankscope stacks` joins their live stacks and names the wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.ranks_job import ranks_job

WORLD = 3  # two stages waiting in recv, each from another peer


@pytest.fixture(scope="module")
def pipeline_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dumps")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, pipeline_dumps: Path) -> Iterator[list[str]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("runtime"), "pipeline", WORLD, dumps=pipeline_dumps) as pids:
        yield [arg for pid in pids for arg in ("--pid", str(pid))]


def _hung(pids: list[str], *more: str) -> dict[str, Any]:
    """The --json report once ranks 1-2 wait in recv (the job hangs within seconds of its handlers' start)."""
    deadline = time.monotonic() + 120
    while True:
        document: dict[str, Any] = run_cli("stacks", *pids, "--json", *more).json()
        divergences = document.get("fr", {}).get("divergences", [])
        if any(d.get("p2p_waits") for d in divergences) or time.monotonic() > deadline:
            return document
        time.sleep(1)


def test_ranks_waiting_in_recv_are_named_as_a_point_to_point_wait(
    pipeline: list[str], tmp_path: Path
) -> None:
    document = _hung(pipeline)
    first = document["fr"]["divergences"][0]
    assert (first["kind"], first["suspects"]) == ("missing", [1, 2])
    [wait] = first["p2p_waits"]
    assert (wait["ranks"], wait["op"], wait["call_site"]["function"]) == (
        "1-2",
        "recv",
        "receive_activations",
    )
    assert "peer" not in wait  # py-spy without --locals cannot read recv's src
    headline = document["fr"]["headline"]
    assert headline.startswith(
        "ranks 1-2 wait in recv (point-to-point; gloo records no send/recv) called from receive_activations "
        "(fr_job.py:"
    ), headline
    assert "peer not known (`rankscope stacks --locals` reads src/dst from the stacks); so ranks 1-2 never " \
        "issued barrier #4" in headline  # fmt: skip

    # The text, from the run that also keeps its files (--out): --from shows it as it was, joined once.
    saved = tmp_path / "saved"
    text = run_cli("stacks", *pipeline, "--out", str(saved))
    assert text.returncode == 0, text.stderr + text.stdout
    out = text.stdout
    assert (
        out.index("Collective desync (flight recorder)")
        < out.index("ranks 1-2 wait in recv")
        < out.index("Main thread")
    )
    again = run_cli("stacks", "--from", str(saved)).stdout
    assert again.count("wait in recv (point-to-point") == 1, again

    # --locals: py-spy reads recv's src, so every rank's peer is named.
    with_locals = _hung(pipeline, "--locals")["fr"]["divergences"][0]
    peers = {w["ranks"]: w.get("peer") for w in with_locals["p2p_waits"]}
    assert peers == {"1": 0, "2": 1}
    assert with_locals["text"].startswith(
        "ranks 1-2 wait in recv (point-to-point; gloo records no send/recv) called from receive_activations "
        "(fr_job.py:56): rank 1 from rank 0, rank 2 from rank 1; so ranks 1-2 never issued "
    ), with_locals["text"]
    assert "peer not known" not in with_locals["text"]


@pytest.fixture(scope="module")
def idle_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("runtime"), "pipeline-idle", WORLD) as pids:
        yield [arg for pid in pids for arg in ("--pid", str(pid))]


def test_with_no_desync_the_ranks_waiting_in_recv_are_still_named(idle_pipeline: list[str]) -> None:
    # Rank 0 sits in its own code: every rank completed the same collectives, so the recorders see no
    # desync; the stacks show ranks 1-2 waiting in recv, and the verdict says so after "no desync".
    # On a loaded machine a rank's handler may answer after the deadline of one run: ask again until
    # every rank's recorder came back (the headline names all three) and the waits are seen.
    deadline = time.monotonic() + 120
    while True:
        result = run_cli("stacks", *idle_pipeline, "--json")
        fr = result.json().get("fr", {})
        every_rank = str(fr.get("headline", "")).startswith("no desync: ranks 0-2 ")
        if (fr.get("p2p_waits") and every_rank) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert result.returncode == 0, result.stderr
    assert fr["desync"] is False and fr["divergences"] == []
    assert [(w["ranks"], w["op"]) for w in fr["p2p_waits"]] == [("1-2", "recv")]
    assert fr["headline"].startswith("no desync: ranks 0-2 issued the same collectives (last completed #3); "
                                     "ranks 1-2 wait in recv (point-to-point; gloo records no send/recv) called "
                                     "from receive_activations (fr_job.py:"), fr["headline"]  # fmt: skip


def test_stacks_with_dump_files_joins_the_waits_and_fr_alone_cannot(
    pipeline: list[str], pipeline_dumps: Path
) -> None:
    # The same ranks' recorders written to files (a dump thread in each rank, once hung).
    alone = run_cli("fr", str(pipeline_dumps))
    assert alone.returncode == 14, alone.stderr + alone.stdout
    assert "ranks 1-2 never issued barrier #4 from main (fr_job.py:" in alone.stdout
    assert "recv" not in alone.stdout  # the files alone hold no trace of the receives
    joined = run_cli("stacks", *pipeline, "--fr", str(pipeline_dumps))
    assert joined.returncode == 0, joined.stderr + joined.stdout
    assert (
        "ranks 1-2 wait in recv (point-to-point; gloo records no send/recv) called from receive_activations "
        "(fr_job.py:56), peer not known (`rankscope stacks --locals` reads src/dst from the stacks); so ranks "
        "1-2 never issued barrier #4 from main (fr_job.py:" in joined.stdout
    ), joined.stdout

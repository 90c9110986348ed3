"""One plain `rankscope stacks` run on a hung gloo job started with TORCH_FR_BUFFER_SIZE=2000
RANKSCOPE_INPROC=1 and no dump code (tests/fr/fr_job.py with OUT_PREFIX ``-``): the ranks' in-process
handlers give their flight recorders in the same pass, and the desync verdict sits above the stacks.

Three ranks (torch 2.13): rank 0 issues an extra all_reduce from log_global_loss, then every rank
hangs in its next collective. Rank 2 runs without the handler: it is named, not a reason to stop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.ranks_job import ranks_job

from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.serial import to_json
from rankscope.stacks.fr_live import LiveRecorders, combine, compact, verdict
from rankscope.stacks.inproc_request import locate

WORLD = 3
NO_HANDLER = 2


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    pytest.importorskip("torch")
    with ranks_job(tmp_path_factory.mktemp("runtime"), "extra", WORLD, without_handler={NO_HANDLER}) as pids:
        yield pids


def _hung_document(pids: list[str]) -> dict[str, Any]:
    """The --json report once every rank waits in its last collective (the job hangs within seconds
    of its handlers' start)."""
    deadline = time.monotonic() + 120
    while True:
        result = run_cli("stacks", *pids, "--json")
        document: dict[str, Any] = result.json()
        divergences = document.get("fr", {}).get("divergences", [])
        if any(d["kind"] == "extra" for d in divergences) or time.monotonic() > deadline:
            return document
        time.sleep(1)


def test_one_stacks_run_explains_the_hang_with_no_code_change(hung_job: list[int], tmp_path: Path) -> None:
    pids = [arg for pid in hung_job for arg in ("--pid", str(pid))]
    document = _hung_document(pids)
    assert document["fr"]["desync"] is True
    fr = document["fr"]
    extra = next(d for d in fr["divergences"] if d["kind"] == "extra")
    assert (extra["seq"], extra["suspects"]) == (3, [0])
    assert extra["sides"][0]["call_site"]["function"] == "log_global_loss"
    assert fr["absent"] == [NO_HANDLER]  # no handler: named, the others still judged
    assert any(
        n.startswith(f"no flight recorder from rank {NO_HANDLER}: no in-process handler") for n in fr["notes"]
    )
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss (fr_job.py:" in fr["headline"]
    assert document["schema"] == "rankscope.stacks/1"
    # The handlers' dump files are removed once read. A poll above that gave up on a slow rank (a
    # loaded machine) never read that rank's late reply: clear those, then one run reads them all.
    directory = locate(hung_job[0])[0]
    for name in os.listdir(directory):
        if name.endswith((".fr", ".reply")):
            os.unlink(os.path.join(directory, name))
    assert run_cli("stacks", *pids, "--json").json()["fr"]["desync"] is True
    assert not [n for n in os.listdir(directory) if n.endswith((".fr", ".reply"))]

    # Text, through the handlers' signal instead of py-spy: the verdict above the stack groups.
    text = run_cli("stacks", *pids, "--via-signal")
    assert text.returncode == 4, text.stderr + text.stdout  # rank 2 has no handler: partial
    out = text.stdout
    verdict = out.index("Collective desync (flight recorder)")
    assert verdict < out.index("Diagnosis") < out.index("Main thread")
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss (fr_job.py:" in out
    assert f"note: no flight recorder from rank {NO_HANDLER}: no in-process handler" in out
    assert "rank 0 — fr: enqueued #4 all_reduce from step (fr_job.py:" in out

    # --out keeps the verdict; --from shows it again, in text and JSON.
    out_dir = tmp_path / "saved"
    assert run_cli("stacks", *pids, "--out", str(out_dir)).returncode == 0
    again = run_cli("stacks", "--from", str(out_dir)).stdout
    assert again.index("Collective desync (flight recorder)") < again.index("Diagnosis")
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss (fr_job.py:" in again
    assert run_cli("stacks", "--from", str(out_dir), "--json").json()["fr"]["divergences"][0]["suspects"] == [
        0
    ]

    # --no-fr: the stacks alone.
    plain = run_cli("stacks", *pids, "--no-fr")
    assert plain.returncode == 0, plain.stderr + plain.stdout
    assert "Collective desync" not in plain.stdout and "Main thread" in plain.stdout


def test_nodes_compact_recorders_align_as_the_files_do() -> None:
    """What each node of a multi-node run sends (call sites, not whole stacks), combined on the head,
    gives the verdict of the dump files themselves; a rank without a recorder is named with its reason."""
    dumps = read_dumps(Path(__file__).parent.parent / "data/fr/gloo-torch2.13/extra").dumps[:2]
    assert [d.rank for d in dumps] == [0, 1]
    nodes = [
        LiveRecorders(dumps=[dumps[0]], world_size=3),
        LiveRecorders(dumps=[dumps[1]], missing={2: "no in-process handler"}, world_size=3),
    ]
    sent = [json.loads(json.dumps(to_json(compact(node)))) for node in nodes]
    assert all(not e["frames"] and e["site"] for s in sent for d in s["dumps"] for e in d["entries"])
    combined = verdict(combine(sent))
    files = analyse(dumps, world_size=3)
    assert combined.headline == files.headline
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss" in combined.headline
    assert combined.absent == [2]
    assert combined.notes[0] == "no flight recorder from rank 2: no in-process handler"

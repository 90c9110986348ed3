"""A real hung gloo job (torch 2.13, 2 ranks, TORCH_FR_BUFFER_SIZE=2000): `rankscope fr` on its
dumps, and `rankscope stacks --fr` joining them with the live stacks.

The dumps are written by a thread inside each rank (tests/fr/fr_job.py) while its main thread is
blocked in a collective: test scaffolding standing in for rankscope's in-process handler.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.ranks_job import ranks_job


@dataclass
class Job:
    pids: list[int]
    dumps: Path


@pytest.fixture(scope="module")
def hung_extra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("fr")
    with ranks_job(None, "extra", 2, dumps=out, dump_after=2) as pids:
        yield Job(pids, out)


def test_fr_names_the_extra_all_reduce_of_a_live_job(hung_extra: Job) -> None:
    result = run_cli("fr", str(hung_extra.dumps), "--json")
    assert result.returncode == 14, result.stderr
    first = result.json()["divergences"][0]
    assert (first["kind"], first["seq"], first["suspects"]) == ("extra", 3, [0])
    assert first["sides"][0]["call_site"]["function"] == "log_global_loss"
    text = run_cli("fr", str(hung_extra.dumps))
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss (fr_job.py:" in text.stdout


def test_stacks_puts_the_verdict_above_the_live_stacks(hung_extra: Job) -> None:
    pids = [arg for pid in hung_extra.pids for arg in ("--pid", str(pid))]
    result = run_cli("stacks", *pids, "--fr", str(hung_extra.dumps))
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    verdict = out.index("Collective desync (flight recorder)")
    assert verdict < out.index("Diagnosis") < out.index("Main thread")
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss" in out
    # Where each rank is now, beside its stack group: both enqueued #4 (all_reduce / barrier), completed #3.
    assert "rank 0 — fr: enqueued #4 all_reduce from step (fr_job.py:" in out
    assert "rank 1 — fr: enqueued #4 barrier from main (fr_job.py:" in out
    document = run_cli("stacks", *pids, "--fr", str(hung_extra.dumps), "--json").json()
    assert document["fr"]["divergences"][0]["kind"] == "extra"
    assert document["schema"] == "rankscope.stacks/1"

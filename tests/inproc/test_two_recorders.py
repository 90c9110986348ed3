"""A CUDA build of torch keeps two flight recorders (seen on an H100, torch 2.11): NCCL's, dumped by
``_dump_nccl_trace``/``_dump_nccl_trace_json``, and the other backends' (gloo), dumped by
``_dump_fr_trace``/``_dump_fr_trace_json``. An NCCL job's collectives are only in the first: the
in-process dump read the second alone and found "no entries" in a live NCCL job. Each recorder is
now dumped and the dumps joined.

No GPU here, and this CPU build has the second recorder only: a stand-in for
``torch._C._distributed_c10d`` answers with real dumps, NCCL's recorded on the H100
(tests/data/gpu-h100/fr_nccl_timeout_rank_0) and gloo's recorded here (tests/data/fr/)."""

from __future__ import annotations

import json
import pickle
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope.inproc.frdump import dump_flight_recorder, join_dumps
from rankscope.inproc.frstatus import recorder_status

DATA = Path(__file__).parents[1] / "data"
NCCL = (DATA / "gpu-h100" / "fr_nccl_timeout_rank_0").read_bytes()
GLOO = (DATA / "fr" / "gloo-torch2.13" / "extra" / "rank_0").read_bytes()
EMPTY_GLOO = pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []})


def _module(nccl: bytes, gloo: bytes) -> types.ModuleType:
    module = types.ModuleType("torch._C._distributed_c10d")

    def status(data: bytes) -> bytes:
        return json.dumps({"pg_status": pickle.loads(data).get("pg_status", {})}).encode()

    module._dump_nccl_trace = lambda *args: nccl  # type: ignore[attr-defined]
    module._dump_fr_trace = lambda *args: gloo  # type: ignore[attr-defined]
    module._dump_nccl_trace_json = lambda *args: status(nccl)  # type: ignore[attr-defined]
    module._dump_fr_trace_json = lambda *args: status(gloo)  # type: ignore[attr-defined]
    return module


@pytest.fixture
def cuda_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    yield


def test_an_nccl_jobs_dump_is_ncclss_recorder_as_torch_wrote_it(
    cuda_build: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", _module(NCCL, EMPTY_GLOO))
    assert dump_flight_recorder(str(tmp_path / "rank_0")) is None
    assert (tmp_path / "rank_0").read_bytes() == NCCL  # the other recorder held nothing
    result = run_cli("fr", str(tmp_path / "rank_0"))
    assert "its #4 all_reduce from log_global_loss (nccl_timeout.py:9) never completed" in result.stdout


def test_both_recorders_with_entries_are_one_dump(
    cuda_build: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", _module(NCCL, GLOO))
    assert dump_flight_recorder(str(tmp_path / "rank_0")) is None
    joined = pickle.loads((tmp_path / "rank_0").read_bytes())
    nccl, gloo = pickle.loads(NCCL), pickle.loads(GLOO)
    assert len(joined["entries"]) == len(nccl["entries"]) + len(gloo["entries"])
    assert [e["record_id"] for e in joined["entries"]] == list(range(len(joined["entries"])))
    times = [e["time_created_ns"] for e in joined["entries"]]
    assert times == sorted(times)
    assert {e["profiling_name"].split(":")[0] for e in joined["entries"]} == {"nccl", "gloo"}
    assert joined["pg_config"]["0"] == nccl["pg_config"]["0"]  # NCCL's names the members
    assert joined["comm_lib_version"] == nccl["comm_lib_version"]
    assert run_cli("fr", str(tmp_path / "rank_0"), "--json").returncode in (0, 4, 14)


def test_one_recorder_alone_is_written_unchanged() -> None:
    nccl = pickle.loads(NCCL)
    assert join_dumps([nccl]) is nccl


def test_the_status_answer_reads_both_recorders(cuda_build: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", _module(NCCL, EMPTY_GLOO))
    assert recorder_status({}) == {"groups": {"0": [4, 3]}, "problem": None}

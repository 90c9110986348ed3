"""`rankscope stacks --from DIR`: a saved `--out` directory re-analysed offline, elsewhere.

The directory of a `--hosts` run is read back in tests/cluster/test_stacks_ssh.py, beside the hung
two-node job its other tests read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job

from rankscope.demo.launch import LaunchedJob

#: `stacks --out` directories written by rankscope 0.1.0 (see its README).
V1 = Path(__file__).parent.parent / "data" / "stacks-out-v1"


def _without_timing(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "seconds"}


def _report_lines(text: str) -> list[str]:
    """The text report without its first line (the time taken) and the line naming where it was read."""
    return [line for line in text.splitlines()[1:] if not line.startswith("read from ")]


@pytest.mark.parametrize("name", ["plain", "native-samples"])
def test_directory_of_the_previous_release_gives_the_same_report(name: str, tmp_path: Path) -> None:
    copy = tmp_path / name
    shutil.copytree(V1 / name, copy)
    saved = json.loads((copy / "stacks.json").read_text())
    result = run_cli("stacks", "--from", str(copy), "--json")
    assert result.returncode == 0, result.stderr
    doc = result.json()
    # Fields added since (jobs[].pids) are the only difference.
    assert [j.pop("pids") for j in doc["jobs"]] == [[]]
    assert _without_timing(doc) == _without_timing(saved)
    text = run_cli("stacks", "--from", str(copy))
    assert text.returncode == 0 and text.stderr == ""
    assert _report_lines(text.stdout) == _report_lines((copy / "report.txt").read_text())
    assert f"read from {copy}/ (groups and diagnosis derived again from its raw dumps)" in text.stdout


def test_groups_are_derived_again_from_the_raw_dumps(tmp_path: Path) -> None:
    """The raw dumps, not stacks.json's groups, make the report: a newer analysis applies to an old directory."""
    copy = tmp_path / "plain"
    shutil.copytree(V1 / "plain", copy)
    doc = json.loads((copy / "stacks.json").read_text())
    doc["groups"] = []
    doc["diagnosis"]["headline"] = "stale"
    (copy / "stacks.json").write_text(json.dumps(doc))
    result = run_cli("stacks", "--from", str(copy), "--json")
    assert result.returncode == 0, result.stderr
    out = result.json()
    assert out["diagnosis"]["divergent_ranks"] == [1]
    assert out["diagnosis"]["headline"].startswith("rank 0 waits in all_reduce")
    assert len(out["groups"]) == len(json.loads((V1 / "plain" / "stacks.json").read_text())["groups"])


def test_without_raw_dumps_the_saved_groups_are_used(tmp_path: Path) -> None:
    """A multi-node --out directory keeps each node's answer, not raw dumps: stacks.json's groups serve."""
    copy = tmp_path / "plain"
    shutil.copytree(V1 / "plain", copy)
    shutil.rmtree(copy / "raw")
    result = run_cli("stacks", "--from", str(copy), "--json")
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert [j.pop("pids") for j in doc["jobs"]] == [[]]
    assert _without_timing(doc) == _without_timing(json.loads((copy / "stacks.json").read_text()))
    text = run_cli("stacks", "--from", str(copy)).stdout
    assert "no raw/ there: groups as stacks.json has them, diagnosis derived again" in text


def test_a_damaged_raw_dump_is_named_and_the_rest_reported(tmp_path: Path) -> None:
    copy = tmp_path / "plain"
    shutil.copytree(V1 / "plain", copy)
    (damaged,) = copy.glob("raw/*.rank-1.*.json")
    damaged.write_bytes(damaged.read_bytes()[:300])  # cut short, as an interrupted copy leaves it
    result = run_cli("stacks", "--from", str(copy), "--json")
    assert result.returncode == 4, result.stderr
    doc = result.json()
    (failure,) = doc["failures"]
    assert failure["target"] == f"raw/{damaged.name}" and failure["stage"] == "parse"
    assert [p["rank"]["rank"] for p in doc["processes"] if p["dumped"]] == [0]
    assert doc["diagnosis"]["missing_ranks"] == [1]
    text = run_cli("stacks", "--from", str(copy))
    assert text.returncode == 4 and f"raw/{damaged.name} [parse] unreadable dump" in text.stdout


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("not-rankscope", "is not a rankscope stacks directory: it has no stacks.json"),
        ("garbage", "stacks.json is not valid JSON"),
        (
            "newer",
            "was written by a newer rankscope (schema rankscope.stacks/2); this one reads rankscope.stacks/1",
        ),
        ("other-schema", "is not a rankscope stacks report (schema 'rankscope.exec/1')"),
    ],
)
def test_bad_directories_are_one_line_with_exit_8(case: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "dir"
    if case != "missing":
        shutil.copytree(V1 / "plain", path)
    if case == "not-rankscope":
        (path / "stacks.json").unlink()
    elif case == "garbage":
        (path / "stacks.json").write_text('{"schema": "rankscope.stacks/1", "groups": [')
    elif case in ("newer", "other-schema"):
        doc = json.loads((path / "stacks.json").read_text())
        doc["schema"] = "rankscope.stacks/2" if case == "newer" else "rankscope.exec/1"
        (path / "stacks.json").write_text(json.dumps(doc))
    result = run_cli("stacks", "--from", str(path))
    assert result.returncode == 8, result.stdout + result.stderr
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
    assert result.stderr.startswith("rankscope: error: ")


def test_options_that_collect_are_refused_with_from(tmp_path: Path) -> None:
    result = run_cli("stacks", "--from", str(V1 / "plain"), "--pid", "1", "--native")
    assert result.returncode == 2
    assert "--from reads a saved run; --pid, --native cannot be used with it" in result.stderr


@pytest.fixture(scope="module")
def two_rank_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    args = ("--scenario", "skip-barrier", "--culprit", "1")
    with torchrun_job(tmp_path_factory.mktemp("from-job"), *args) as job:
        yield job


@pytest.mark.slow
def test_out_then_from_elsewhere_after_the_job_is_gone(two_rank_job: LaunchedJob, tmp_path: Path) -> None:
    out = tmp_path / "cluster" / "dumps"
    live = run_cli("stacks", "--pid", str(two_rank_job.pid), "--out", str(out), "--json", timeout=180)
    assert live.returncode == 0, live.stderr
    live_doc = live.json()
    assert live_doc["diagnosis"]["divergent_ranks"] == [1]
    two_rank_job.stop()  # the job is gone: only the directory is left
    copy = tmp_path / "laptop" / "bug-report"
    shutil.copytree(out, copy)
    shutil.rmtree(out)
    again = run_cli("stacks", "--from", str(copy), "--json")
    assert again.returncode == 0, again.stderr
    assert _without_timing(again.json()) == _without_timing(live_doc)
    text = run_cli("stacks", "--from", str(copy))
    assert text.returncode == 0, text.stderr
    assert _report_lines(text.stdout) == _report_lines((copy / "report.txt").read_text())
    assert "rank 1 is elsewhere: load_batch" in text.stdout


def test_fields_and_failure_kinds_of_a_newer_release_are_read(tmp_path: Path) -> None:
    """A newer rankscope may add fields and failure kinds without a new schema version."""
    copy = tmp_path / "plain"
    shutil.copytree(V1 / "plain", copy)
    doc = json.loads((copy / "stacks.json").read_text())
    doc["added_later"] = {"x": 1}
    doc["processes"][0]["added_later"] = True
    doc["failures"] = [
        {"target": "pid 7", "stage": "dump", "reason": "why", "hint": "fix", "rank": None, "kind": "new-kind"}
    ]
    (copy / "stacks.json").write_text(json.dumps(doc))
    result = run_cli("stacks", "--from", str(copy), "--json")
    assert result.returncode == 4, result.stderr
    (failure,) = result.json()["failures"]
    assert failure["kind"] == "other" and failure["reason"] == "why"
    doc["failures"][0]["stage"] = "a stage added later"
    (copy / "stacks.json").write_text(json.dumps(doc))
    result = run_cli("stacks", "--from", str(copy))
    assert result.returncode == 8 and "if a newer rankscope wrote it, upgrade rankscope" in result.stderr

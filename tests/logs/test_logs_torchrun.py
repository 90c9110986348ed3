"""`rankscope logs` on the console output of real 4-rank torchrun jobs that crash.

Three ranks raise one ValueError (its message differs per rank in numbers only), rank 1 raises
a RuntimeError, so the ValueError's ranks fold into a list with a gap and a range ("0,2-3").
The jobs run with ``--role HOST: --tee 3 --log-dir`` (one job: the console log and the log
directory tree), with no option, and with a line prefix template. And a 3-rank job in which one
rank's error makes the others lose their gloo peer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import run_torchrun

from rankscope.ranks import short_hostname

JOB = Path(__file__).parent / "jobs" / "crash_job.py"
PEER_LOSS_JOB = Path(__file__).parent / "jobs" / "peer_loss_job.py"
HOST = short_hostname()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _crash(
    tmp: Path,
    torchrun_args: list[str],
    env: Optional[dict[str, str]] = None,
    script: Path = JOB,
    nproc: int = 4,
) -> Path:
    log = tmp / "job.log"
    script_args = ["--odd-rank", "1"] if script == JOB else []
    environment = {**os.environ, **(env or {})}
    code = run_torchrun(
        tmp,
        log,
        *script_args,
        script=script,
        timeout=240,
        nproc=nproc,
        torchrun_args=torchrun_args,
        env=environment,
    )
    assert code != 0, log.read_text(errors="replace")[-2000:]
    return log


@pytest.fixture(scope="module")
def role_tee_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One job for the console log and the log directory: ``--tee`` also writes the files."""
    tmp = tmp_path_factory.mktemp("roletee")
    _crash(tmp, ["--role", f"{HOST}:", "--tee", "3", "--log-dir", str(tmp / "tl")])
    yield tmp


@pytest.fixture
def role_tee_log(role_tee_job: Path) -> Path:
    return role_tee_job / "job.log"


@pytest.fixture(scope="module")
def plain_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _crash(tmp_path_factory.mktemp("plain"), [])


@pytest.fixture(scope="module")
def template_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    template = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${role_name}:${rank}]:"}
    yield _crash(tmp_path_factory.mktemp("template"), ["--tee", "3"], env=template)


@pytest.fixture
def log_dir(role_tee_job: Path) -> Path:
    return role_tee_job / "tl"


def _groups(data: dict[str, object]) -> list[tuple[str, str]]:
    groups = data["groups"]
    assert isinstance(groups, list)
    return [(g["exception_type"], g["ranks"]) for g in groups]


def test_errors_with_role_and_tee(role_tee_log: Path) -> None:
    result = run_cli("logs", "errors", str(role_tee_log), "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["schema"] == "rankscope.logs.errors/1"
    assert _groups(data) == [("ValueError", f"{HOST}:[0,2-3]"), ("RuntimeError", f"{HOST}:1")]
    assert data["groups"][0]["messages_vary"] is True
    assert data["groups"][0]["normalised_message"] == "bad batch size <n> on rank <n>"
    assert data["minority"] == [1]
    assert data["first_failure"]["label"].startswith(f"{HOST}:")
    # torchrun's own ChildFailedError is kept apart from the ranks' errors
    assert [g["exception_type"] for g in data["unprefixed_groups"]] == [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    ]
    # torchrun's failure summary: every rank, exactly one root cause
    failures = data["torchrun_failures"]
    assert sorted({f["rank"] for f in failures}) == list(range(4))
    assert len([f for f in failures if f["root_cause"]]) == 1


def test_errors_text_prints_each_error_once(role_tee_log: Path) -> None:
    result = run_cli("logs", "errors", str(role_tee_log))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"root cause: {HOST}:")
    assert out.splitlines()[2].startswith("2 distinct error(s) (2 culprit) from 4 rank(s)")
    exception_lines = [
        line
        for line in out.splitlines()
        if line.startswith("  ") and line.strip().split(":")[0].endswith("Error")
    ]
    assert [line.split(":")[0].strip() for line in exception_lines] == [
        "ValueError",
        "RuntimeError",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
    ]
    assert f"error 2 of 2 — culprit, 1 rank(s): {HOST}:1" in out
    assert f"3 rank(s): {HOST}:[0,2-3]" in out
    assert "torchrun's root cause (first failure it observed): rank " in out


def test_errors_without_role_uses_torch_rank_prefix(plain_log: Path) -> None:
    data = run_cli("logs", "errors", str(plain_log), "--json").json()
    assert _groups(data) == [("ValueError", "0,2-3"), ("RuntimeError", "1")]


def test_errors_with_log_line_prefix_template(template_log: Path) -> None:
    assert "[default:1]:" in template_log.read_text()
    data = run_cli("logs", "errors", str(template_log), "--json").json()
    assert _groups(data) == [("ValueError", "0,2-3"), ("RuntimeError", "1")]


def test_ranks_lists_every_rank(role_tee_log: Path) -> None:
    data = run_cli("logs", "ranks", str(role_tee_log), "--json").json()
    assert data["schema"] == "rankscope.logs.ranks/1"
    assert [r["label"] for r in data["ranks"]] == [f"{HOST}:{r}" for r in range(4)]
    assert all(r["lines"] >= 10 for r in data["ranks"])
    assert data["unprefixed_lines"] > 0  # torchrun's own summary


def test_grep_one_rank_strips_prefix(role_tee_log: Path) -> None:
    result = run_cli("logs", "grep", "--rank", f"{HOST}:1", str(role_tee_log))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "rank 1: all_reduce gave 4.0"
    assert "Traceback (most recent call last):" in lines
    assert lines[-1] == "RuntimeError: gradient for layer 7 is not finite on rank 1"
    assert not any("ValueError" in line for line in lines)
    kept = run_cli("logs", "grep", "--rank", f"{HOST}:1", "--keep-prefix", str(role_tee_log)).stdout
    assert all(line.startswith(f"[{HOST}:1]:") for line in kept.splitlines())


def test_split_writes_private_per_rank_files(role_tee_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "per-rank"
    result = run_cli("logs", "split", str(role_tee_log), "--out", str(out))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"{HOST}_rank{r}.log" for r in range(4)] + ["unprefixed.log"])
    assert out.stat().st_mode & 0o777 == 0o700
    assert (out / f"{HOST}_rank1.log").stat().st_mode & 0o777 == 0o600
    assert "RuntimeError" in (out / f"{HOST}_rank1.log").read_text()


def test_errors_on_torchrun_log_dir_tree(log_dir: Path) -> None:
    data = run_cli("logs", "errors", str(log_dir), "--json").json()
    assert _groups(data) == [("ValueError", "0,2-3"), ("RuntimeError", "1")]
    ranks = run_cli("logs", "ranks", str(log_dir), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == [str(r) for r in range(4)]


def test_errors_name_the_raising_rank_and_its_victims(tmp_path: Path) -> None:
    """Rank 1 raises; ranks 0 and 2 lose their gloo peer; rank 2 also logged a caught exception."""
    # a monitor interval of 2 s: the peers print their errors before torchrun stops them
    args = ["--role", f"{HOST}:", "--tee", "3", "--monitor-interval", "2"]
    log = _crash(tmp_path, args, script=PEER_LOSS_JOB, nproc=3)
    data = run_cli("logs", "errors", str(log), "--json").json()
    roles = [(g["role"], g["exception_type"], g["ranks"]) for g in data["groups"]]
    assert roles[0] == ("culprit", "ValueError", f"{HOST}:1")
    assert roles[-1] == ("handled", "ValueError", f"{HOST}:2")
    victims = {label for g in data["groups"] if g["role"] == "victim" for label in g["labels"]}
    assert victims == {f"{HOST}:0", f"{HOST}:2"}
    root = data["root_cause"]
    assert (root["label"], root["global_rank"]) == (f"{HOST}:1", 1)
    assert (root["where"], root["function"]) == (f"{PEER_LOSS_JOB}:22", "read_labels")
    text = run_cli("logs", "errors", str(log)).stdout
    assert text.startswith(
        f"root cause: {HOST}:1: ValueError: label 1000 out of range for 100 classes on rank 1"
    )

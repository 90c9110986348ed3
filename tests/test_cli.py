"""The command line a user meets first: help, version, demo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.cli import hide_module, run_cli

from rankscope.cli.main import VERBS


def test_top_level_help_lists_every_verb() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for verb in VERBS:
        assert verb in result.stdout


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_has_help_with_examples(verb: str) -> None:
    result = run_cli(verb, "--help")
    assert result.returncode == 0, result.stderr
    assert "Examples:" in result.stdout and f"rankscope {verb}" in result.stdout


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("rankscope, version ")


def test_unknown_verb_is_a_usage_error() -> None:
    result = run_cli("frobnicate")
    assert result.returncode == 2 and "No such command" in result.stderr


def test_whoami_dead_pid() -> None:
    result = run_cli("whoami", "--pid", "999999")
    assert result.returncode == 8 and result.stderr.strip() == (
        "rankscope: error: no process with pid 999999 — check the pid with ps or pgrep"
    )


@pytest.mark.slow
def test_demo_names_the_culprit() -> None:
    pytest.importorskip("torch.distributed")
    result = run_cli("demo", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 2 is elsewhere: update_index (hang_job.py:" in result.stdout
    assert "demo: rankscope named rank 2" in result.stdout
    assert "job stopped and cleaned up" in result.stderr


@pytest.mark.slow
def test_demo_other_scenario_and_culprit() -> None:
    pytest.importorskip("torch.distributed")
    result = run_cli("demo", "--scenario", "skip-barrier", "--culprit", "1", "--nproc", "2", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 1 is elsewhere: load_batch (hang_job.py:" in result.stdout


def test_demo_without_torch_is_one_line_and_exit_6(tmp_path: Path) -> None:
    result = run_cli("demo", env={**os.environ, "PYTHONPATH": hide_module(tmp_path, "torch")}, timeout=60)
    assert result.returncode == 6, result.stdout + result.stderr
    assert result.stderr.strip() == (
        "rankscope: error: the demo needs PyTorch and it is not installed in this environment"
        " — pip install torch (the CPU build is enough; see the README's first command)"
    )
    assert result.stdout == ""


def test_a_demo_that_misses_says_which_ranks_it_named_in_words() -> None:
    from rankscope.demo.run import DemoResult
    from rankscope.model import Member
    from rankscope.stacks.report import Diagnosis, StacksReport

    def named(ranks: list[int]) -> str:
        diagnosis = Diagnosis("", divergent=[Member("vm", 100 + rank, rank) for rank in ranks])
        return DemoResult(StacksReport(), diagnosis, culprit=2, launcher_pid=1).named

    assert (named([0, 1, 3]), named([1]), named([])) == ("ranks 0-1,3", "rank 1", "no rank")

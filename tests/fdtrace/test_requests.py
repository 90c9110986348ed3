"""The options of `fds` and `strace` read into their frozen request objects by name."""

from __future__ import annotations

from rankscope.cli.fds import FdsRequest, fds
from rankscope.cli.params import from_params
from rankscope.cli.strace import StraceRequest, strace


def test_fds_and_strace_read_their_options_by_name() -> None:
    with fds.make_context("fds", ["12", "34", "--json"]) as ctx:
        assert from_params(FdsRequest, ctx.params) == FdsRequest((12, 34), False, True)
    with fds.make_context("fds", ["--job"]) as ctx:
        assert from_params(FdsRequest, ctx.params) == FdsRequest((), True, False)
    with strace.make_context("strace", ["7", "--seconds", "2.5", "--json"]) as ctx:
        assert from_params(StraceRequest, ctx.params) == StraceRequest((7,), False, 2.5, True)
    with strace.make_context("strace", ["--job"]) as ctx:
        assert from_params(StraceRequest, ctx.params).seconds == 5.0


def test_strace_missing_is_one_line_with_the_install_command() -> None:
    import os

    from tests.support.cli import run_cli

    result = run_cli("strace", str(os.getpid()), env={**os.environ, "PATH": "/nonexistent"})
    assert result.returncode == 6
    assert result.stderr.strip() == (
        "rankscope: error: strace not found on PATH — install it: apt-get install strace (or dnf install strace)"
    )


def test_pids_and_job_together_are_a_usage_error() -> None:
    from tests.support.cli import run_cli

    for verb in ("fds", "strace"):
        result = run_cli(verb, "1", "--job")
        assert result.returncode == 2 and "name PIDs or use --job, not both" in result.stderr

"""--help is the documentation a pip-installed user has: exit codes, placeholders, no internal options."""

from __future__ import annotations

import re

import pytest
from tests.support.cli import run_cli

from rankscope.cli.exit_help import MEANING, VERB_CODES
from rankscope.errors import ExitCode


def _codes(help_text: str) -> list[int]:
    """The codes listed under 'Exit codes' at the end of a help text."""
    tail = help_text.split("Exit codes", 1)[1]
    return [int(m) for m in re.findall(r"^\s+(\d+)  \S", tail, re.MULTILINE)]


def test_top_level_help_lists_every_exit_code() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert _codes(result.stdout) == [int(code) for code in ExitCode] + [130, 143]
    assert "docs/exit-codes.md" not in result.stdout
    assert "  8  bad input" in result.stdout


@pytest.mark.parametrize(
    "verb",
    [
        ["stacks"],
        ["demo"],
        ["whoami"],
        ["exec"],
        ["logs"],
        ["logs", "errors"],
        ["logs", "grep"],
        ["net", "check"],
        ["doctor"],
        ["launch"],
        ["gpu-test"],
        ["bench", "allreduce"],
        ["core", "bt"],
    ],
)
def test_each_verb_lists_the_codes_it_uses(verb: list[str]) -> None:
    result = run_cli(*verb, "--help")
    assert result.returncode == 0, result.stderr
    assert _codes(result.stdout) == list(VERB_CODES[verb[0]])
    words = " ".join(result.stdout.split())
    for code in VERB_CODES[verb[0]]:
        assert f"{code} {MEANING[code]}" in words


def test_every_verb_has_its_exit_codes() -> None:
    """A verb added later without an entry in the table would have no exit codes in its --help."""
    from rankscope.cli.main import VERBS

    assert set(VERBS) == set(VERB_CODES) | {"prefix"}


def test_prefix_says_it_passes_the_command_code_on() -> None:
    assert "Exit code: the command's own" in run_cli("prefix", "--help").stdout


def test_internal_option_is_hidden_but_works() -> None:
    help_text = run_cli("stacks", "--help").stdout
    assert "--slurm-job" not in help_text
    # What --jobid passes to every node still works: no such job here is "nothing found".
    result = run_cli("stacks", "--slurm-job", "999999", "--json")
    assert result.returncode == 3 and "no Python process of SLURM job 999999" in result.stderr


def test_placeholders_name_what_goes_there() -> None:
    stacks = run_cli("stacks", "--help").stdout
    for option in (
        "--pid PID",
        "--out DIR",
        "--from DIR",
        "--timeout SECONDS",
        "--deadline SECONDS",
        "--interval SECONDS",
        "--samples N",
        "--jobs N",
        "--jobid JOBID",
        "--fanout N",
        "--node-timeout SECONDS",
        "--hostfile FILE",
    ):
        assert option in stacks, option
    assert "INTEGER" not in stacks and "FLOAT" not in stacks
    assert "--pid PID" in run_cli("whoami", "--help").stdout
    demo = run_cli("demo", "--help").stdout
    assert "--nproc N" in demo and "--culprit RANK" in demo

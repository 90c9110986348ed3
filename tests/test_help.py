"""--help is the documentation a pip-installed user has: exit codes, placeholders, no internal options."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from tests.support.cli import run_cli

from rankscope.cli.exit_help import MEANING, SPECIAL, VERB_CODES
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
        ["why"],
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
        ["fds"],
        ["strace"],
        ["core", "bt"],
        ["attach"],
        ["numerics", "demo"],
        ["fr"],
        ["trace", "tail"],
        ["runtime", "prune"],
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

    assert set(VERBS) == set(VERB_CODES) | set(SPECIAL)


@pytest.mark.parametrize("verb", ["prefix", "rerun"])
def test_wrappers_say_they_pass_the_command_code_on(verb: str) -> None:
    assert "Exit code: the command's own" in run_cli(verb, "--help").stdout


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


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """Every verb of the command tree, with its name as typed (``logs grep``)."""
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None, name
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


def test_no_verb_shows_a_click_type_name_as_placeholder() -> None:
    """Every option that takes a value names what goes there (DIR, N, SECONDS, PORT, RANK),
    never click's type name (INTEGER, FLOAT RANGE, TEXT, PATH), in any verb's --help."""
    from rankscope.cli.main import cli

    verbs = dict(_commands(cli))
    assert {"stacks", "logs grep", "logs errors", "exec", "net check", "prefix", "doctor", "launch"} <= set(
        verbs
    )
    unnamed = []
    for name, command in verbs.items():
        for param in command.params:
            if param.metavar is not None or isinstance(param.type, click.Choice):
                continue
            if isinstance(param, click.Option) and (param.is_flag or param.hidden):
                continue
            if isinstance(param, click.Argument):
                # an argument shows its own name (INPUTS) unless its type has a name of its own
                if param.type.name.upper() in _TYPE_NAMES and param.type.name != "text":
                    unnamed.append(f"{name} {param.name}: {param.type.name}")
                continue
            unnamed.append(f"{name} {param.opts[0]}: {param.type.name.upper()}")
    assert unnamed == []
    # and the words a user sees in the help text itself
    for name in verbs:
        text = run_cli(*name.split(), "--help").stdout
        shown = re.findall(r"^\s+(-[-\w]+(?:, -[-\w]+)?) ([A-Z][A-Z ]*[A-Z])\b", text, re.MULTILINE)
        chosen = {param.metavar for param in verbs[name].params}  # --remote-rankscope PATH: a path
        assert not [(option, word) for option, word in shown if word in _TYPE_NAMES - chosen], name


_TYPE_NAMES = {
    "INTEGER", "FLOAT", "TEXT", "PATH", "FILENAME", "DIRECTORY", "BOOLEAN", "UUID", "DATETIME",
    "INTEGER RANGE", "FLOAT RANGE",
}  # fmt: skip


def test_readme_names_exactly_the_verbs_that_have_json() -> None:
    """README says which verbs take --json; the command tree is the truth."""
    from pathlib import Path

    from rankscope.cli.main import cli

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    said = re.search(r"is on every verb whose output is data: (.*?)\. Not on (.*?)\.", readme, re.DOTALL)
    assert said is not None
    with_json = set(re.findall(r"`([a-z -]+)`", said.group(1)))
    without = set(re.findall(r"`([a-z -]+)`", said.group(2)))
    verbs = dict(_commands(cli))
    have = {name for name, command in verbs.items() if any("--json" in p.opts for p in command.params)}
    assert with_json == have
    assert (set(verbs) - have) <= without, set(verbs) - have - without

"""The click-free reading of plain `rankscope stacks` command lines agrees with click's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankscope.cli.plain import parse_plain
from rankscope.cli.stacks import stacks

PLAIN = [
    ["stacks"],
    ["stacks", "--pid", "42", "--pid=43", "--json"],
    ["stacks", "--native", "--locals", "--timeout", "2.5", "--no-color", "--color"],
    ["stacks", "--local", "--json", "--deadline", "30", "--full", "--no-color"],
    ["stacks", "--timeout=0.1", "--deadline=1e3"],
    ["stacks", "--out", "OUT"],
]
NOT_PLAIN = [
    ["stacks", "--all-python"],
    ["stacks", "--samples", "3"],
    ["stacks", "--hosts", "n[1-4]"],
    ["stacks", "--jobs", "1"],
    ["stacks", "--slurm-job", "7"],
    ["stacks", "--pid", "x"],
    ["stacks", "--pid", "-1"],
    ["stacks", "--pid"],
    ["stacks", "--native=yes"],
    ["stacks", "--timeout", "0.05"],
    ["stacks", "--timeout", "nan"],
    ["stacks", "--help"],
    ["stacks", "-h"],
    ["stacks", "extra"],
    ["stacks", "--nat"],
    ["logs", "errors", "x.log"],
    ["--debug", "stacks"],
    [],
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_plain_command_lines_read_as_click_reads_them(argv: list[str], tmp_path: Path) -> None:
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    plain = parse_plain(argv)
    assert plain is not None
    params = stacks.make_context("stacks", argv[1:]).params
    mine = plain.as_dict()
    assert mine.pop("pids") == params["pids"]
    out = mine.pop("out")
    assert (None if out is None else Path(out)) == params["out_dir"]
    for name, value in mine.items():
        assert params[name] == value, name


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=lambda a: " ".join(a) or "(none)")
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert parse_plain(argv) is None


def test_out_naming_a_file_goes_to_click(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert parse_plain(["stacks", "--out", str(a_file)]) is None
    with pytest.raises(Exception, match="is a file"):
        stacks.make_context("stacks", ["--out", str(a_file)])

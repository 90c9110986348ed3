"""`rankscope stacks` on this node without click: the request click would read, the report click's
path prints, and no click import on the way (the start-up docs/benchmarks.md measures)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields

import click
import pytest

from rankscope.cli.stacks import StacksRequest, read_request, stacks
from rankscope.cli.stacks_request import PLAIN_FLAGS, read_plain
from rankscope.cmdline import FLAG
from rankscope.stacks.options import StacksOptions

#: `python -X importtime` names each module on its own line: click's package line.
IMPORTS_CLICK = re.compile(r"\| +click$", re.MULTILINE)

#: Command lines the light entry reads: every flag it knows, the ends of every range.
PLAIN = [
    ["stacks"],
    ["stacks", "--pid", "4242", "--no-color"],
    ["stacks", "--json", "--pid", "1", "--pid", "2", "--full", "--color"],
    ["stacks", "--color", "--no-color", "--local"],
    ["stacks", "--all-python", "--native", "--locals", "--samples", "1000", "--interval", "0"],
    ["stacks", "--native-all", "--samples", "1", "--timeout", "0.1", "--deadline", "0.1", "--jobs", "256"],
    ["stacks", "--jobs", "1", "--interval", "2.5", "--timeout", "7", "--deadline", "1e3"],
    ["stacks", "--via-signal", "--no-fr", "--slurm-job", "2180718"],
    StacksOptions(pids=(5, 6), samples=3, interval=1 / 3, parallelism=9, slurm_job="7").to_argv(),
]

#: Command lines click reads (or refuses) itself.
CLICK_ONLY = [
    ["stacks", "--help"],
    ["stacks", "-h"],
    ["--debug", "stacks"],
    ["why"],
    ["stacks", "--pid=4"],
    ["stacks", "--pid"],
    ["stacks", "--pid", "-5"],
    ["stacks", "--pid", "x"],
    ["stacks", "somewhere"],
    ["stacks", "--out", "dumps"],
    ["stacks", "--from", "dumps"],
    ["stacks", "--fr", "dumps"],
    ["stacks", "--html", "page.html"],
    ["stacks", "--folded"],
    ["stacks", "--hosts", "n[1-2]"],
    ["stacks", "--local", "--json", "--jobid", "7"],
    ["stacks", "--remote-rankscope", "/opt/rankscope"],
    ["stacks", "--via-signal", "--native"],
    ["stacks", "--via-signal", "--locals"],
]

#: Values out of click's ranges (or not numbers it compares): click says what is wrong.
OUT_OF_RANGE = [
    ["stacks", "--samples", "0"],
    ["stacks", "--samples", "1001"],
    ["stacks", "--interval", "-0.5"],
    ["stacks", "--timeout", "0.09"],
    ["stacks", "--deadline", "0"],
    ["stacks", "--jobs", "0"],
    ["stacks", "--jobs", "257"],
    ["stacks", "--samples", "2.5"],
]


def click_request(argv: list[str]) -> StacksRequest:
    """``rankscope ARGV`` read by the real click command, without running it."""
    with stacks.make_context("stacks", list(argv[1:])) as ctx:
        return read_request(ctx.params)


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_run_is_read_as_click_reads_it(argv: list[str]) -> None:
    request = read_plain(argv)
    assert request is not None
    assert request == click_request(argv)


def test_the_plain_runs_use_every_flag_the_light_entry_knows() -> None:
    used = {word for argv in PLAIN for word in argv}
    known = {spec.metadata[FLAG] for spec in fields(StacksOptions) if FLAG in spec.metadata}
    assert known | set(PLAIN_FLAGS) <= used


@pytest.mark.parametrize("argv", CLICK_ONLY + OUT_OF_RANGE, ids=" ".join)
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert read_plain(argv) is None


@pytest.mark.parametrize("argv", OUT_OF_RANGE, ids=" ".join)
def test_click_refuses_what_the_light_entry_leaves_to_it(argv: list[str]) -> None:
    with pytest.raises(click.BadParameter):
        click_request(argv)


#: The same command line through the console entry (light, with -X importtime) and through click.
ENTRIES = {
    "light": [sys.executable, "-X", "importtime", "-m", "rankscope"],
    "click": [sys.executable, "-c", "import sys; from rankscope.cli.main import main; main(sys.argv[1:])"],
}


@pytest.fixture
def sleeping_python() -> Iterator[int]:
    """A Python process that has started and sleeps: its pid (its group is ended afterwards)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "up\n"
        yield process.pid
    finally:
        os.killpg(process.pid, 9)
        process.wait()


def test_a_text_run_prints_the_report_without_importing_click(sleeping_python: int) -> None:
    """A real dump: the light entry and click's path print the same report (but the time it
    took), and the light entry never imports click."""
    argv = ["stacks", "--pid", str(sleeping_python), "--no-color"]
    runs = {
        name: subprocess.run([*entry, *argv], capture_output=True, text=True)
        for name, entry in ENTRIES.items()
    }
    assert not IMPORTS_CLICK.search(runs["light"].stderr)
    assert "rankscope.stacks.local" in runs["light"].stderr  # the report's own modules: it ran
    assert [run.returncode for run in runs.values()] == [0, 0]
    assert "1 of 1 processes dumped" in runs["light"].stdout
    took = re.compile(r"took [0-9.]+s")
    assert took.sub("took", runs["light"].stdout) == took.sub("took", runs["click"].stdout)


#: Run `rankscope stacks ARGS` through the light entry, noting which of the report's modules were
#: imported when the dumps began: when the thread that imports them beside the dumps was started,
#: right before the first py-spy (printed to stderr as one line). Which of the two threads then runs
#: first is the scheduler's choice: under load the imports may win the race to the first spawn (it
#: failed a test run once when this was noted at the first spawn instead).
FIRST_SPAWN = """
import sys
from rankscope.stacks import local
started = local.Meanwhile
def noted(names, *args, **kwargs):
    later = ("rankscope.stacks.analyse", "rankscope.stacks.render", "rankscope.stacks.report")
    sys.stderr.write("at first dump: " + ",".join(m for m in later if m in sys.modules) + "\\n")
    return started(names, *args, **kwargs)
local.Meanwhile = noted
from rankscope.cli.node import main
main(sys.argv[1:])
"""


def test_the_first_dump_starts_before_the_report_is_imported(sleeping_python: int) -> None:
    """The report's modules are imported while the dumps run (rankscope.stacks.local.AFTER_DUMPS),
    not before they begin; the report is the same."""
    run = subprocess.run(
        [sys.executable, "-c", FIRST_SPAWN, "stacks", "--pid", str(sleeping_python), "--no-color"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "at first dump: \n" in run.stderr
    assert "1 of 1 processes dumped" in run.stdout
    assert "Main thread" in run.stdout

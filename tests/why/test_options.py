"""The command line every node of a multi-node `why` gets reads back to the same options."""

from __future__ import annotations

from pathlib import Path

from rankscope.cli.why import read_request, why
from rankscope.why.options import WhyOptions


def _parsed(argv: list[str]) -> WhyOptions:
    context = why.make_context("why", argv)
    return read_request(context.params).options


def test_every_option_reaches_the_nodes() -> None:
    options = WhyOptions(
        pids=(4, 5), logs=("a.log", "b.log"), fr="/fr/", cores="/c", timeout=7.5, slurm_job="12"
    )
    argv = options.to_argv()
    assert argv[:3] == ["why", "--local", "--json"]
    assert _parsed(argv[1:]) == options


def test_a_node_finishes_before_the_caller_drops_it() -> None:
    assert WhyOptions(timeout=60).for_node(10).timeout == 7.0
    assert WhyOptions().to_argv() == ["why", "--local", "--json"]


def test_the_page_and_the_folded_stacks_are_made_where_why_runs(tmp_path: Path) -> None:
    page = tmp_path / "why.html"
    context = why.make_context("why", ["--hosts", "node[1-2]", "--html", str(page), "--folded", "--pid", "4"])
    request = read_request(context.params)
    assert request.html == page and request.folded and request.cluster is not None
    argv = request.node_argv()
    assert "--html" not in argv and "--folded" not in argv and str(page) not in argv, argv
    assert argv[1:] == ["why", "--local", "--json", "--pid", "4"], argv

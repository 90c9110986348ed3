"""The command line every node of a multi-node `why` gets reads back to the same options."""

from __future__ import annotations

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

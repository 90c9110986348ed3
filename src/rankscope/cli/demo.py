"""`rankscope demo`: see rankscope diagnose a real hung job."""

from __future__ import annotations

import sys
from typing import Any

import click

from rankscope.cli.params import from_params
from rankscope.errors import ExitCode

HELP = """Launch a real 4-rank torchrun job (gloo, CPU) in which one rank deadlocks,
wait for the hang, diagnose it with `rankscope stacks`, print the report, and
clean everything up. Needs PyTorch (any build; CPU is enough).

Exits 0 only when the diagnosis names the injected rank (9 otherwise).

\b
Examples:
  rankscope demo
  rankscope demo --culprit 1 --scenario skip-barrier
  rankscope demo --nproc 8 --native
"""

SCENARIOS = ["lock", "skip-barrier", "deep"]


@click.command(help=HELP)
@click.option(
    "--nproc", type=click.IntRange(2, 64), default=4, show_default=True, metavar="N", help="Ranks to start."
)
@click.option(
    "--culprit", type=int, default=2, show_default=True, metavar="RANK", help="The rank that misbehaves."
)
@click.option(
    "--scenario",
    type=click.Choice(SCENARIOS),
    default="lock",
    show_default=True,
    help="lock: self-deadlock on a lock; skip-barrier: never reaches the barrier; deep: stuck deep in its own calls.",
)
@click.option("--native", is_flag=True, help="Diagnose with native frames too.")
def demo(**params: Any) -> int:
    from rankscope.demo.run import DemoOptions, run_demo
    from rankscope.stacks.render import render_text

    options = from_params(DemoOptions, params)
    culprit = options.culprit
    if not 0 <= culprit < options.nproc:
        raise click.BadParameter(f"must be between 0 and {options.nproc - 1}", param_hint="--culprit")

    def say(message: str) -> None:
        click.echo(click.style("demo: ", fg="magenta") + message, err=True)

    result = run_demo(options, say)
    click.echo(render_text(result.report, result.diagnosis, color=sys.stdout.isatty()))
    if result.named_culprit:
        click.echo(
            click.style(f"demo: rankscope named rank {culprit}, the rank that was made to hang.", fg="green")
        )
        return int(ExitCode.OK)
    click.echo(
        click.style(
            f"demo: the diagnosis named {result.named}, not rank {culprit}.",
            fg="red",
        )
    )
    return int(ExitCode.DEMO_MISSED)

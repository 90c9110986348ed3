"""`rankscope rerun --sync|--cpu -- CMD`: run a failed program again where its traceback tells the truth."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import ExitCode
from rankscope.rerun.advice import sync_warnings
from rankscope.rerun.collect import failure_in_log, run_again
from rankscope.rerun.render import render
from rankscope.serial import dump_document

HELP = """Run CMD again with CUDA_LAUNCH_BLOCKING=1 (--sync) or without GPUs (--cpu), and point
to the line of your code that raised the error.

\b
A CUDA kernel error is reported asynchronously: the traceback shows where the error was
noticed, not the launch that caused it. With --sync every kernel launch waits, so the
traceback points at the culprit; with --cpu (CUDA_VISIBLE_DEVICES="") torch runs on CPU
and checks indexes at once. CMD's output passes through as it comes; afterwards rankscope
names the error and the last frame of your own code (not torch, not an installed package,
not the standard library) on stderr. With --compare it reads the first run's log as
`rankscope logs errors` does and says where the two runs disagree.

\b
CMD runs in a process group of its own; signals to rankscope reach the whole group; what
CMD leaves running is ended when it exits. --sync says so when no CUDA device is visible
here (it changes nothing then), and warns when this Python's NCCL is known to hang under
CUDA_LAUNCH_BLOCKING=1 (rerun one rank without NCCL then, e.g. --cpu).

\b
Examples:
  rankscope rerun --cpu -- python train.py
  rankscope rerun --sync --compare job.log -- python train.py --steps 1
  rankscope rerun --cpu --timeout 600 --json -- python train.py | jq .comparison.text
"""


@dataclass(frozen=True)
class RerunRequest:
    """Everything one `rankscope rerun` command line asks for."""

    command: tuple[str, ...]
    sync: bool = False
    cpu: bool = False
    compare: Optional[str] = None
    timeout: Optional[float] = None
    as_json: bool = False


@click.command(help=HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--sync", is_flag=True, help="Set CUDA_LAUNCH_BLOCKING=1: every kernel launch waits for the kernel."
)
@click.option("--cpu", is_flag=True, help='Set CUDA_VISIBLE_DEVICES="": no GPU, torch runs on CPU.')
@click.option(
    "--compare",
    metavar="LOG",
    default=None,
    help="The log of the failed first run: say where the rerun's error disagrees with it.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="End CMD's process group after this long (exit code 124).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (schema rankscope.rerun/1); CMD's stdout goes to stderr.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def rerun(**params: Any) -> int:
    request = from_params(RerunRequest, params)
    if not request.sync and not request.cpu:
        raise click.UsageError("choose --sync (CUDA_LAUNCH_BLOCKING=1), --cpu (no GPU), or both")
    # The first run's log is read before the command runs: a wrong path fails at once.
    first = failure_in_log(request.compare) if request.compare is not None else None
    warnings = sync_warnings(request.sync, request.cpu)
    for warning in warnings:
        click.echo(f"rankscope: warning: {warning}", err=True)
    document = run_again(
        list(request.command),
        os.environ,
        request.sync,
        request.cpu,
        timeout=request.timeout,
        stdout=sys.stderr.buffer if request.as_json else None,
        compare_log=request.compare,
        first=first,
        warnings=warnings,
    )
    code = document.exit_code
    if request.as_json:
        click.echo(json.dumps(dump_document(document), indent=2))
    else:
        click.echo(render(document), err=True)
    return code if code else ExitCode.OK

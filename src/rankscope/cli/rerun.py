"""`rankscope rerun --sync|--cpu -- CMD`: run a failed program again where its traceback tells the truth."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import click

from rankscope.cli.params import from_params
from rankscope.cli.prefix import run_passing_through
from rankscope.errors import ExitCode
from rankscope.rerun.advice import sync_warnings
from rankscope.rerun.collect import Capture, failure_in_log, failure_in_output, rerun_environment, settings
from rankscope.rerun.compare import Comparison, FailurePoint, compare
from rankscope.serial import dump_document

#: The exit code when --timeout ended the command (as GNU timeout).
TIMED_OUT = 124

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


@dataclass
class RerunDocument:
    """``rankscope.rerun``: the command, how it ended, its error and user frame, the comparison."""

    SCHEMA: ClassVar[str] = "rankscope.rerun/1"

    command: list[str]
    #: What the rerun set in the command's environment.
    environment: dict[str, str]
    exit_code: int
    timed_out: bool
    #: The fatal error of the rerun (with ``user_frame``), None when it left no traceback.
    error: Optional[FailurePoint]
    comparison: Optional[Comparison]
    warnings: list[str] = field(default_factory=list)


def _frame_lines(point: FailurePoint) -> list[str]:
    frame = point.user_frame
    if frame is None:
        return ["  in your code: no frame of your own code in the traceback (all in torch or packages)"]
    out = [f"  in your code: {frame.filename}:{frame.line} in {frame.function}"]
    if frame.code:
        out.append(f"      {frame.code}")
    return out


def render(document: RerunDocument) -> str:
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in document.environment.items())
    ended = (
        f"timed out, ended (exit code {document.exit_code})"
        if document.timed_out
        else f"exit code {document.exit_code}"
    )
    out = [f"rankscope rerun ({shown}): {ended}"]
    error = document.error
    if error is None:
        out.append("  no traceback in the output")
    else:
        out.append(f"  error: {error.exception}")
        out.extend(_frame_lines(error))
        if error.location_unreliable:
            out.append(
                "  location still unreliable: CUDA reported this error asynchronously in the rerun too"
            )
    if document.comparison is not None:
        out.append(f"  against {document.comparison.log}: {document.comparison.text}")
    return "\n".join(out)


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
    capture = Capture()
    ran = run_passing_through(
        list(request.command),
        env=rerun_environment(os.environ, request.sync, request.cpu),
        tap=capture,
        timeout=request.timeout,
        stdout=sys.stderr.buffer if request.as_json else None,
    )
    code = TIMED_OUT if ran.timed_out else ran.code
    error = failure_in_output(capture.data())
    document = RerunDocument(
        command=list(request.command),
        environment=settings(request.sync, request.cpu),
        exit_code=code,
        timed_out=ran.timed_out,
        error=error,
        comparison=compare(request.compare, first, error, code) if request.compare is not None else None,
        warnings=warnings,
    )
    if request.as_json:
        click.echo(json.dumps(dump_document(RerunDocument.SCHEMA, document), indent=2))
    else:
        click.echo(render(document), err=True)
    return code if code else ExitCode.OK

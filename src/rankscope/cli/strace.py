"""`rankscope strace`: what a process does for a few seconds, what it is blocked on, which calls fail."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from rankscope.cli.fds import targets_of
from rankscope.cli.params import from_params
from rankscope.errors import ExitCode
from rankscope.inspect.render import render_strace
from rankscope.inspect.report import StraceReport
from rankscope.inspect.trace import trace
from rankscope.lifetime import StopSignals
from rankscope.serial import dump_document

HELP = """Attach strace to a process (every thread) for a few seconds, detach, and summarise:
what each thread is blocked on right now (a socket's peer address, a pipe, a lock), which calls
failed, grouped by error with the paths and addresses they named (EAGAIN, ETIMEDOUT and EINTR
are folded as routine), and the calls that took the time. The process keeps running: strace
detaches at the deadline, and a process it left stopped is continued.

\b
Examples:
  rankscope strace 4242                  # 5 seconds
  rankscope strace 4242 --seconds 20     # a slower loop
  rankscope strace --job --seconds 3     # every rank on this node, at once
  rankscope strace 4200                  # a launcher (torchrun, mpirun): each of its ranks
  rankscope strace 4242 --json | jq '.processes[0].blocked'
"""


@dataclass(frozen=True)
class StraceRequest:
    pids: tuple[int, ...] = ()
    job: bool = False
    seconds: float = 5.0
    as_json: bool = False


@click.command(help=HELP)
@click.argument("pids", nargs=-1, type=int, metavar="[PID]...")
@click.option("--job", is_flag=True, help="Every rank of the distributed job(s) on this node.")
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1, max=3600),
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="How long to trace.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.strace document.")
def strace(**params: Any) -> int:
    request = from_params(StraceRequest, params)
    targets = targets_of(request.pids, request.job)
    with StopSignals() as stop:
        traces, failures = trace(targets, request.seconds, stop.fd)
    report = StraceReport(tuple(traces), tuple(failures))
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_strace(report), nl=False)
    if stop.signum:
        return 128 + stop.signum
    if not failures:
        return ExitCode.OK
    return ExitCode.PARTIAL if traces else ExitCode.ALL_FAILED

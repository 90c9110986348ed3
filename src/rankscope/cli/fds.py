"""`rankscope fds`: a process's open file descriptors, classified."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from rankscope.cli.params import from_params
from rankscope.errors import ExitCode, NothingFoundError, RankscopeError
from rankscope.inspect.collect import process_fds
from rankscope.inspect.render import render_fds
from rankscope.inspect.report import FdsReport
from rankscope.model import Failure, FailureKind, Stage
from rankscope.procs import ProcessTarget, resolve_targets
from rankscope.serial import dump_document

HELP = """List the open file descriptors of a process, classified: files (mode, offset),
deleted files, sockets with their local and peer addresses and TCP state (from the process's
own network namespace), pipes, eventfds, epolls (and the descriptors they watch), NVIDIA and
InfiniBand devices. A summary comes first: counts per kind and the open-files limit.

\b
Examples:
  rankscope fds 4242                 # one process
  rankscope fds --job                # every rank of every job on this node
  rankscope fds 4200                 # a launcher (torchrun, mpirun): each of its ranks
  rankscope fds 4242 --peers         # and who holds the other end of each pipe
  rankscope fds 4242 --json | jq '.processes[0].fds[] | select(.kind == "socket")'
"""


@dataclass(frozen=True)
class FdsRequest:
    pids: tuple[int, ...] = ()
    job: bool = False
    as_json: bool = False
    peers: bool = False


def targets_of(pids: tuple[int, ...], job: bool) -> list[ProcessTarget]:
    if job and pids:
        raise click.UsageError("name PIDs or use --job, not both")
    if job:
        found = resolve_targets(job=True)
        if not found:
            raise NothingFoundError(
                "no distributed job on this node (no process with a rank in its environment under a launcher)",
                "name the process instead: rankscope fds PID",
            )
        return found
    if not pids:
        raise click.UsageError("name a PID, or --job for every rank on this node")
    return resolve_targets(pids)


def collect(targets: list[ProcessTarget], peers: bool = False) -> tuple[FdsReport, int]:
    """Every target's descriptors; with one target, its error is the command's; with several, data."""
    if len(targets) == 1:
        pid, rank = targets[0]
        return FdsReport((process_fds(pid, rank, peers),)), ExitCode.OK
    found, failures = [], []
    for pid, rank in targets:
        try:
            found.append(process_fds(pid, rank, peers))
        except RankscopeError as exc:
            kind = FailureKind.PERMISSION if exc.exit_code == ExitCode.PERMISSION_DENIED else FailureKind.GONE
            failures.append(Failure(f"pid {pid}", Stage.DISCOVER, exc.message, exc.hint, rank, kind))
    code = ExitCode.OK if not failures else ExitCode.PARTIAL if found else ExitCode.ALL_FAILED
    return FdsReport(tuple(found), tuple(failures)), code


@click.command(help=HELP)
@click.argument("pids", nargs=-1, type=int, metavar="[PID]...")
@click.option("--job", is_flag=True, help="Every rank of the distributed job(s) on this node.")
@click.option(
    "--peers",
    is_flag=True,
    help="Name the other processes holding each pipe (reads every process's descriptors on the node).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.fds document.")
def fds(**params: Any) -> int:
    request = from_params(FdsRequest, params)
    report, code = collect(targets_of(request.pids, request.job), request.peers)
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_fds(report), nl=False)
    return code

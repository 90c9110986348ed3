"""`rankscope whoami`: the rank identity of a process, as rankscope reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode
from rankscope.ranks import current_rank, rank_of_pid
from rankscope.serial import to_json

HELP = """Show the rank identity (host, rank, local rank, world size, node rank, launcher)
that rankscope derives from a process's environment.

\b
Examples:
  rankscope whoami                 # this shell (inside srun/mpirun/torchrun --no-python)
  rankscope whoami --pid 4243      # a worker of a running job
  rankscope whoami --pid 4243 --json
"""


@dataclass(frozen=True)
class WhoamiRequest:
    """Everything one `rankscope whoami` command line asks for."""

    #: Read this process's environment instead of our own.
    pid: Optional[int] = None
    as_json: bool = False


@click.command(help=HELP)
@click.option(
    "--pid",
    type=int,
    default=None,
    metavar="PID",
    help="Read /proc/PID/environ instead of this process's environment.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def whoami(**params: Any) -> int:
    request = from_params(WhoamiRequest, params)
    pid = request.pid
    if pid is None:
        rank = current_rank()
    else:
        try:
            rank = rank_of_pid(pid)
        except FileNotFoundError:
            raise BadInputError(f"no process with pid {pid}", "check the pid with ps or pgrep") from None
        except PermissionError:
            raise BadInputError(
                f"cannot read /proc/{pid}/environ: permission denied",
                "run as the process owner or as root",
            ) from None
    if request.as_json:
        click.echo(json.dumps(to_json(rank), indent=2))
    else:
        for key, value in to_json(rank).items():
            click.echo(f"{key:17} {'-' if value is None else value}")
    return ExitCode.OK

"""`rankscope prefix -- CMD`: run a command and prefix each of its output lines with [host:rank]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.passthrough import prefix_label, run_prefixed

HELP = """Run CMD and put [host:rank] in front of every line it writes to stdout and stderr.

\b
The rank comes from the launcher's environment (torchrun --no-python, srun, mpirun, pdsh
with RANK set ...). Lines are written as soon as they are complete; stdout stays stdout
and stderr stays stderr; the exit code of CMD is passed through (128+N if killed by signal N).
CMD runs in a process group of its own and signals to prefix reach the whole group; what
CMD leaves running is ended when it exits. A line longer than 4 MiB is written in 4 MiB
pieces, each with the prefix.

\b
Examples:
  srun rankscope prefix -- python train.py
  mpirun -np 16 rankscope prefix --short-host -- python train.py
  torchrun --no-python --nproc-per-node 8 rankscope prefix -- python train.py
"""


@dataclass(frozen=True)
class PrefixRequest:
    """Everything one `rankscope prefix` command line asks for."""

    command: tuple[str, ...]
    short_host: bool = False
    #: This rank instead of the environment's.
    rank_override: Optional[int] = None


@click.command(help=HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--short-host", is_flag=True, help="Host as its digits only (node-017 -> 017), like tr -dc 0-9."
)
@click.option(
    "--rank",
    "rank_override",
    type=int,
    default=None,
    metavar="RANK",
    help="Use this rank instead of the environment's.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def prefix(**params: Any) -> int:
    request = from_params(PrefixRequest, params)
    label = prefix_label(request.short_host, request.rank_override)
    return run_prefixed(list(request.command), label)

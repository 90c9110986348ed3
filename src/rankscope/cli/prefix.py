"""`rankscope prefix -- CMD`: run a command and prefix each of its output lines with [host:rank]."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode, MissingToolError
from rankscope.model import rank_label
from rankscope.ranks import current_rank

HELP = """Run CMD and put [host:rank] in front of every line it writes to stdout and stderr.

\b
The rank comes from the launcher's environment (torchrun --no-python, srun, mpirun, pdsh
with RANK set ...). Lines are written as soon as they are complete; stdout stays stdout
and stderr stays stderr; the exit code of CMD is passed through (128+N if killed by signal N).

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


def _label(short_host: bool, rank_override: Optional[int]) -> str:
    rank = current_rank()
    host = rank.host
    if short_host:
        host = re.sub(r"[^0-9]", "", host) or host
    number = rank_override if rank_override is not None else rank.rank
    return f"[{rank_label(host, number)}] "


def _pump(source: IO[bytes], sink: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    try:
        for line in iter(source.readline, b""):
            with lock:
                sink.write(prefix + line)
                sink.flush()
    except (BrokenPipeError, ValueError, OSError):
        # Our reader went away (`| head`): closing the child's pipe gives it SIGPIPE on its
        # next write, as if it had been piped to head itself.
        pass
    finally:
        source.close()


@click.command(help=HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--short-host", is_flag=True, help="Host as its digits only (node-017 -> 017), like tr -dc 0-9."
)
@click.option(
    "--rank", "rank_override", type=int, default=None, help="Use this rank instead of the environment's."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def prefix(**params: Any) -> int:
    request = from_params(PrefixRequest, params)
    label = _label(request.short_host, request.rank_override)
    command = request.command
    try:
        child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise MissingToolError(command[0], "check the command name and PATH") from None
    except PermissionError:
        raise BadInputError(f"{command[0]} is not executable", "check its permissions") from None

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    lock = threading.Lock()
    assert child.stdout is not None and child.stderr is not None
    prefix_bytes = label.encode()
    pumps = [
        threading.Thread(
            target=_pump, args=(child.stdout, sys.stdout.buffer, prefix_bytes, lock), daemon=True
        ),
        threading.Thread(
            target=_pump, args=(child.stderr, sys.stderr.buffer, prefix_bytes, lock), daemon=True
        ),
    ]
    for pump in pumps:
        pump.start()
    code = child.wait()
    for pump in pumps:
        pump.join()
    if code < 0:
        return 128 - code
    if code == 0:
        return ExitCode.OK
    return code

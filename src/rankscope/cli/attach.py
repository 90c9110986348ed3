"""`rankscope attach`: type at the pdb of a rank stopped by rankscope.breakpoint() with no terminal."""

from __future__ import annotations

import codecs
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.debug import client, remote
from rankscope.errors import ExitCode, RankscopeError

HELP = """Attach to the pdb of a rank that rankscope.breakpoint() stopped without a terminal
(srun, pdsh, a background torchrun): the rank prints the line to copy on its stderr.

\b
Examples:
  rankscope attach 127.0.0.1:41234 --token 3q2Y...   # the line rank 1 printed, on its node
  ssh -L 41234:127.0.0.1:41234 node7                 # from elsewhere: tunnel first, then the line above
  rankscope attach --pid 4243                        # a rank running Python >= 3.14 (PEP 768), no breakpoint needed

Line editing and history as in pdb. Ctrl-D or q detaches: the rank goes on and the other ranks
are released; c continues (the session ends when no breakpoint is left). A wrong token is
refused (exit 7) and the rank keeps waiting for the right one.
"""


@dataclass(frozen=True)
class AttachRequest:
    """Everything one `rankscope attach` command line asks for."""

    address: Optional[str] = None
    token: Optional[str] = None
    pid: Optional[int] = None
    timeout: float = client.CONNECT_TIMEOUT


@click.command(help=HELP)
@click.argument("address", metavar="[HOST:PORT]", required=False)
@click.option(
    "--token",
    metavar="T",
    envvar="RANKSCOPE_ATTACH_TOKEN",
    help="The token the rank printed (or RANKSCOPE_ATTACH_TOKEN, which other users cannot see in ps).",
)
@click.option(
    "--pid", type=int, metavar="PID", help="Attach to a running rank with python -m pdb -p (Python >= 3.14)."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=client.CONNECT_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait to connect and for the rank's answer (one client at a time: "
    "a rank that has a client already does not answer).",
)
def attach(**params: Any) -> int:
    request = from_params(AttachRequest, params)
    if request.pid is not None:
        if request.address is not None:
            raise click.UsageError("give HOST:PORT or --pid, not both")
        argv = client.pdb_attach_argv(request.pid)
        try:
            os.execv(argv[0], argv)
        except OSError as exc:
            raise RankscopeError(
                f"cannot run {argv[0]}: {exc.strerror or exc}",
                "run pdb -p with the process's Python by hand: PYTHON -m pdb -p PID",
                ExitCode.MISSING_TOOL,
            ) from None
    if request.address is None or not request.token:
        raise click.UsageError("give HOST:PORT and --token T as the stopped rank printed them (or --pid PID)")
    host, port = client.parse_address(request.address)
    conn, greeting = client.connect(host, port, request.token, request.timeout)
    click.echo(f"rankscope: attached to {greeting}; Ctrl-D or q detaches (the rank goes on)", err=True)
    return _talk(conn, greeting)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _talk(conn: socket.socket, who: str) -> int:
    """Show pdb's text; at each of its prompts read a line (with readline on a terminal) and send it."""
    if sys.stdin.isatty():
        import readline  # noqa: F401  (input() gains line editing and history)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    partial = ""  # text after the last newline: the prompt, when the input marker follows
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                _write(partial)
                click.echo(f"\nrankscope: the session with {who} ended; it goes on", err=True)
                return ExitCode.OK
            pieces = data.split(remote.INPUT)
            for index, piece in enumerate(pieces):
                text = partial + decoder.decode(piece)
                head, newline, partial = text.rpartition("\n")
                _write(head + newline)
                if index == len(pieces) - 1:
                    break
                line = _read_line(partial)
                partial = ""
                if line is None:
                    conn.close()
                    click.echo(f"\nrankscope: detached from {who}; it goes on", err=True)
                    return ExitCode.OK
                conn.sendall((line + "\n").encode())
    except KeyboardInterrupt:
        conn.close()
        click.echo(f"\nrankscope: interrupted; detached from {who} (it goes on at its next prompt)", err=True)
        return 130
    except OSError as exc:
        click.echo(f"\nrankscope: the connection to {who} broke ({exc.strerror or exc})", err=True)
        return ExitCode.ALL_FAILED


def _read_line(prompt: str) -> Optional[str]:
    """One line typed at ``prompt``; ``None`` on Ctrl-D. Ctrl-C at the prompt asks again."""
    while True:
        try:
            return input(prompt)
        except EOFError:
            return None
        except KeyboardInterrupt:
            sys.stdout.write("\n")

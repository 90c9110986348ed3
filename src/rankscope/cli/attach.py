"""`rankscope attach`: type at the pdb of a rank stopped by rankscope.breakpoint() with no terminal."""

from __future__ import annotations

import codecs
import re
import socket
import sys
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.debug import client, remote
from rankscope.errors import ExitCode

HELP = """Attach to the pdb of a rank that rankscope.breakpoint() stopped without a terminal
(srun, pdsh, a background torchrun): the rank prints the line to copy on its stderr.

\b
Examples:
  rankscope attach --pid 48213               # the line rank 1 printed, run on its node
  ssh -t node7 rankscope attach --pid 48213  # from another machine
  rankscope attach --pid 4243                # no breakpoint: a rank on Python >= 3.14 (PEP 768)
  rankscope attach 10.0.0.7:41234 --token-file /tmp/rankscope-1000/node7.pid-48213.pdb-41234.token

Only the rank's user and root may attach (the kernel tells the rank who connects; no secret is
printed or stored). A rank started with RANKSCOPE_BREAKPOINT_HOST/_PORT listens on TCP instead
and names a token file that only its user and root can read.

Line editing and history as in pdb. Ctrl-D or q detaches: the rank goes on and the other ranks
are released; c continues (the session ends when no breakpoint is left). Another user is
refused (exit 7), and so is a wrong token; the rank keeps waiting.
"""


@dataclass(frozen=True)
class AttachRequest:
    """Everything one `rankscope attach` command line asks for."""

    address: Optional[str] = None
    token: Optional[str] = None
    token_file: Optional[str] = None
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
@click.option("--token-file", metavar="FILE", help="The file holding the token, as a TCP rank printed it.")
@click.option(
    "--pid",
    type=int,
    metavar="PID",
    help="The rank stopped by rankscope.breakpoint(); without one, python -I -m pdb -p PID "
    "(Python >= 3.14) as the process's own user.",
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
        name = client.breakpoint_socket(request.pid)
        if name is None:  # no rankscope breakpoint there: PEP 768, as the process's own user
            client.exec_as_owner(client.pdb_attach_argv(request.pid), request.pid)
        conn, greeting = client.connect_pid(request.pid, name, request.timeout)
    else:
        token = request.token
        if request.token_file:
            token = client.read_token_file(request.token_file)
        if request.address is None or not token:
            raise click.UsageError(
                "give --pid PID as the stopped rank printed it (or HOST:PORT and --token-file FILE)"
            )
        host, port = client.parse_address(request.address)
        conn, greeting = client.connect(host, port, token, request.timeout)
    click.echo(f"rankscope: attached to {greeting}; Ctrl-D or q detaches (the rank goes on)", err=True)
    return _talk(conn, greeting)


#: Control characters other than tab, newline and carriage return: a process sending them could
#: drive the terminal of whoever attaches (escape sequences that retitle, recolour, clear or
#: answer back), root's included. They are shown as ^X (C0, DEL) or U+FFFD (C1).
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` with its control characters made visible and inert."""
    return _CONTROLS.sub(lambda m: f"^{chr(ord(m[0]) ^ 0x40)}" if ord(m[0]) <= 0x7F else "\ufffd", text)


def _write(text: str) -> None:
    sys.stdout.write(shown(text))
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
                line = _read_line(shown(partial))
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

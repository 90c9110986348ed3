"""`rankscope` entry point: a click group whose verbs are imported only when used.

Lazy loading keeps `rankscope stacks` start-up fast: the multi-node fan-out, the demo and the log
parsers are only imported by the verbs that need them.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional

import click

from rankscope import __version__
from rankscope.cli.exit_help import epilog, full_table
from rankscope.cli.guard import run_guarded
from rankscope.errors import ExitCode

#: verb -> "module:attribute" of its click command.
VERBS: dict[str, str] = {
    "why": "rankscope.cli.why:why",
    "stacks": "rankscope.cli.stacks:stacks",
    "demo": "rankscope.cli.demo:demo",
    "whoami": "rankscope.cli.whoami:whoami",
    "logs": "rankscope.cli.logs:logs",
    "prefix": "rankscope.cli.prefix:prefix",
    "rerun": "rankscope.cli.rerun:rerun",
    "exec": "rankscope.cli.exec:exec_cmd",
    "net": "rankscope.cli.net:net",
    "launch": "rankscope.cli.launch:launch",
    "doctor": "rankscope.cli.doctor:doctor",
    "gpu-test": "rankscope.cli.gputest:gpu_test",
    "bench": "rankscope.cli.bench:bench",
    "fds": "rankscope.cli.fds:fds",
    "strace": "rankscope.cli.strace:strace",
    "core": "rankscope.cli.core:core",
    "attach": "rankscope.cli.attach:attach",
    "numerics": "rankscope.cli.numerics:numerics",
    "fr": "rankscope.cli.fr:fr",
    "trace": "rankscope.cli.trace:trace",
    "watch": "rankscope.cli.watch:watch",
    "runtime": "rankscope.cli.runtime:runtime_group",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(VERBS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name in VERBS:
            module_name, attr = VERBS[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            _add_exit_codes(cmd_name, command)
            return command
        return super().get_command(ctx, cmd_name)


def _add_exit_codes(verb: str, command: click.Command) -> None:
    """Every verb's --help ends with the exit codes it uses (a group's subcommands too)."""
    if not command.epilog:
        command.epilog = epilog(verb)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            if not sub.epilog:
                sub.epilog = epilog(verb)


HELP = """Find out what is wrong with a multi-node, multi-GPU PyTorch job.

\b
Examples:
  rankscope why                       # the verdict first: which rank, what cause, where
  rankscope demo                      # see it diagnose a real hung 4-rank job
  rankscope stacks                    # which ranks of the job on this node hang, and where
  rankscope stacks --pid 4242 --json  # one launcher (or worker), machine-readable
  rankscope whoami --pid 4243         # the rank identity of a process
  rankscope exec --hosts n[1-4] -- date  # one command on many nodes, outputs folded
  rankscope doctor                    # is this node ready? each problem with its fix
  rankscope fds 4242                  # open files and sockets (peer addresses) of a rank
  rankscope strace 4242 --seconds 5   # what it is blocked on, which calls fail
  rankscope core bt core.*            # what crashed, where, on which ranks (gdb + pystack)
  rankscope launch train.py --nodes 2 --gpus 8 --hosts n[1-2]  # torchrun/sbatch/pdsh/mpirun lines

Add --debug (before the verb) for a traceback on errors.
"""


@click.group(
    cls=LazyGroup, help=HELP, epilog=full_table(), context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="rankscope")
@click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _click_main(argv: Optional[list[str]]) -> Any:
    """The click group, with click's own endings (usage errors, --help, Ctrl-C at a prompt) as exit codes."""
    try:
        return cli.main(args=argv, prog_name="rankscope", standalone_mode=False)
    except SystemExit:
        # click's ending of a closed pipe (EPIPE): stdout wrapped in its PacifyFlushWrapper, then exit 1
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):  # _PacifyFlushWrapper in click 8.5
            return 0  # a reader that stopped early (`| head`) is no failure: as every verb ends then
        raise
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return ExitCode.USAGE
    except click.exceptions.Abort as exc:  # Ctrl-C, or SIGTERM raised as rankscope.lifetime.Terminated
        signum = int(getattr(exc.__cause__, "signum", 2))
        click.echo("rankscope: interrupted" if signum == 2 else "rankscope: terminated (SIGTERM)", err=True)
        return 128 + signum


def main(argv: Optional[list[str]] = None) -> Any:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    # Commands return their exit code (standalone_mode=False hands it back here).
    run_guarded(lambda: _click_main(argv), debug)

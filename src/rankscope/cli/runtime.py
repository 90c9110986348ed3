"""`rankscope runtime`: the per-user runtime directory (docs/inproc.md, "Files"); `runtime prune`
removes the files of processes that ended long ago (rankscope.inproc.prune)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode, RankscopeError
from rankscope.inproc import runtime
from rankscope.inproc.prune import Pruned, prune
from rankscope.inproc.stale import KEEP_DAYS
from rankscope.serial import dump_document

HELP = """The per-user runtime directory: progress markers, the in-process handler's files, crash and
SIGTERM dumps (${RANKSCOPE_RUNTIME_DIR}, else ${TMPDIR:-/tmp}/rankscope-<uid>).

\b
Examples:
  rankscope runtime prune --dry-run     # which files of ended processes would go
  rankscope runtime prune               # remove them (kept 7 days after their last write)
"""

PRUNE_HELP = """Remove the files of processes that are gone from your runtime directory: a file goes
when it was last written more than --older-than days ago and no process has its pid any more, or
the process that has it now started after the file was written (a reused pid). Recent files stay,
so `rankscope why` can still read the crash and SIGTERM dumps of a job that just ended. Files of
other hosts (a directory on a shared file system), names rankscope did not write, symbolic links and
files of other users are never touched. The directory must be yours, a real directory, mode 0700.
`stacks`, `why` and `watch` do the same (at most 500 files) once a day by themselves.

\b
Examples:
  rankscope runtime prune --dry-run               # list what would go, remove nothing
  rankscope runtime prune                         # files of ended processes, older than 7 days
  rankscope runtime prune --older-than 0          # every file of an ended process
  rankscope runtime prune --dir /shared/rs --json | jq '.removed | length'
"""


@dataclass(frozen=True)
class PruneRequest:
    directory: Optional[str] = None
    older_than: float = KEEP_DAYS
    dry_run: bool = False
    limit: int = 10000
    as_json: bool = False


@click.group(help=HELP)
def runtime_group() -> None:
    pass


@runtime_group.command("prune", help=PRUNE_HELP)
@click.option(
    "--dir",
    "directory",
    metavar="DIR",
    help="The runtime directory (default: $RANKSCOPE_RUNTIME_DIR, else ${TMPDIR:-/tmp}/rankscope-<uid>).",
)
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=KEEP_DAYS,
    show_default=True,
    metavar="DAYS",
    help="Keep every file written less than DAYS ago.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=10000,
    show_default=True,
    metavar="N",
    help="Remove at most N files (the oldest first); run again for the rest.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.runtime.prune/1).")
def prune_command(**params: Any) -> int:
    request = from_params(PruneRequest, params)
    directory = request.directory or runtime.runtime_dir(os.environ, os.getuid())
    try:
        result = prune(directory, request.older_than, request.dry_run, request.limit)
    except FileNotFoundError as exc:
        if request.directory is not None:
            raise BadInputError(f"{directory}: no such directory", "name your runtime directory") from exc
        result = Pruned(directory, request.older_than, request.dry_run)  # never made: nothing to prune
    except runtime.UnsafeDirectory as exc:
        raise BadInputError(
            f"{directory} is not your private runtime directory: {exc}",
            "rankscope prunes only a real directory of your own with mode 0700 (run it as its owner)",
        ) from exc
    except PermissionError as exc:
        raise RankscopeError(
            f"{directory}: permission denied", "run it as the directory's owner", ExitCode.PERMISSION_DENIED
        ) from exc
    except OSError as exc:
        raise BadInputError(f"{directory}: {exc.strerror or exc}", "name your runtime directory") from exc
    if request.as_json:
        click.echo(json.dumps(dump_document(result), indent=2))
    else:
        click.echo(render(result), nl=False)
    return ExitCode.PARTIAL if result.failed else ExitCode.OK


def render(result: Pruned) -> str:
    """The run in a few lines: what went (or would go), then what could not."""
    verb = "would remove" if result.dry_run else "removed"
    days = f"{result.older_than_days:g}"
    lines = [
        f"{result.directory}: {verb} {len(result.removed)} file{'' if len(result.removed) == 1 else 's'} of ended processes"
        f" (last written over {days} days ago); kept {result.kept},"
        f" left {result.untouched} other names alone"
    ]
    lines += [f"  {r.name}  ({r.reason}; {r.age_days:g} days old)" for r in result.removed]
    lines += [f"  not removed: {f.name}: {f.reason}" for f in result.failed]
    if result.vanished:
        lines.append(f"  {result.vanished} went away meanwhile")
    if result.left:
        lines.append(f"  {result.left} more past --limit: run it again")
    return "\n".join(lines) + "\n"

"""`rankscope core`: core files: backtraces of crashes and of hung processes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import click

from rankscope.cli.outfiles import FORCE_OPTION, OutDir
from rankscope.cli.progress import tty_progress
from rankscope.errors import BadInputError, ExitCode
from rankscope.serial import dump_document

HELP = """Core files: what crashed and where, for one core or one per rank.

\b
Examples:
  rankscope core bt core.4242                    # signal, crashing thread, frames, what it means
  rankscope core bt /tmp/cores/core.*            # one core per rank: the same crash grouped
  rankscope core bt core.4242 --out bug-report/  # full gdb and pystack text to attach to a bug report
  rankscope core check                           # will a crash here leave a core, and where?
  rankscope core list                            # the cores on this node, newest first
"""


@click.group(help=HELP)
def core() -> None:
    pass


BT_HELP = """Backtraces of core files: the summary first (signal, the thread that got it, its top native
and Python frames, the libraries on its stack, what a known pattern means), then cores that could
not be read. gdb reads each core with the executable recorded in the core (its NT_FILE and auxv
notes), so the right python is used even when another is first on PATH; pystack adds the Python
frames. Cores of several ranks with the same signal and innermost frames are shown once, with the
ranks that share them (the rank comes from the launcher's variables in the core's environment).

\b
Examples:
  rankscope core bt core.4242
  rankscope core bt /tmp/cores/core.*              # "the same crash on ranks 0-7"
  rankscope core bt core.4242 --python /opt/conda/bin/python3.11  # the core's python is elsewhere here
  rankscope core bt core.4242 --out report/        # report/<core>.txt: all threads, gdb and pystack text
  rankscope core bt core.4242 --json | jq '.groups[0].example.python'
"""


@core.command("bt", help=BT_HELP)
@click.argument("cores", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False),
    help="The executable to read the cores with (default: the one each core records).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, help="Seconds per core."
)
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), help="Write the full text of each core here."
)
@FORCE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.core.bt/1).")
def bt(
    cores: tuple[str, ...],
    python: Optional[str],
    timeout: float,
    out_dir: Optional[Path],
    force: bool,
    as_json: bool,
) -> int:
    from rankscope.core.backtrace import SCHEMA
    from rankscope.core.collect import backtraces
    from rankscope.core.render import full_text, render
    from rankscope.ranks import short_hostname

    out = OutDir(out_dir, force) if out_dir is not None else None
    progress = tty_progress(min_interval=0.25)
    try:
        report = backtraces(list(cores), python, short_hostname(), timeout, progress=progress)
    finally:
        if progress is not None:
            progress.clear()
    document = dump_document(SCHEMA, report)
    if out is not None:
        with out:
            names: set[str] = set()
            for index, one in enumerate(report.cores):
                name = os.path.basename(one.notes.path) + ".txt"
                name = f"{index}-{name}" if name in names else name
                names.add(name)
                out.write(name, full_text(one))
            out.write("summary.txt", render(report) + "\n")
            out.write("core-bt.json", json.dumps(document, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(render(report))
    if report.bad:
        return ExitCode.BAD_INPUT
    return ExitCode.OK


CHECK_HELP = """Will a crash here leave a core, and where? Reads ulimit -c (soft and hard),
kernel.core_pattern (a path, the working directory, or a pipe to systemd-coredump or apport),
kernel.core_uses_pid and whether the directory is writable, and prints the exact commands that fix
each problem: for this shell, for good (limits.d, sysctl.d) and for a job's launcher line. It
changes nothing.

\b
Examples:
  rankscope core check
  rankscope core check --json | jq .will_dump
  srun --ntasks-per-node=1 rankscope core check     # every node of an allocation
"""


@core.command("check", help=CHECK_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.core.check/1).")
def check(as_json: bool) -> int:
    from rankscope.core.setup import SCHEMA, read_setup, render

    setup = read_setup()
    if as_json:
        click.echo(json.dumps(dump_document(SCHEMA, setup), indent=2))
    else:
        click.echo(render(setup))
    return ExitCode.OK


LIST_HELP = """Core files on this node, newest first, with the pid, executable, signal and rank each one
records in its own notes. Without DIR: the working directory, the directory kernel.core_pattern
names, /var/crash (apport reports), /var/lib/apport/coredump, and systemd-coredump's list
(coredumpctl) where it is installed. A file is a core by its ELF header, whatever its name.

\b
Examples:
  rankscope core list
  rankscope core list /scratch/cores/ --json
  rankscope core bt $(rankscope core list --json | jq -r '.cores[0].path')   # the newest one
"""


def _when(mtime: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))


@core.command("list", help=LIST_HELP)
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.core.list/1).")
def list_cmd(dirs: tuple[str, ...], as_json: bool) -> int:
    from rankscope.core.listing import SCHEMA, default_places, list_cores

    for directory in dirs:
        if not os.path.isdir(directory):
            raise BadInputError(f"{directory}: no such directory", "pass directories that hold core files")
    if dirs:
        places = list(dirs)
    else:
        try:
            with open("/proc/sys/kernel/core_pattern") as f:
                pattern: Optional[str] = f.read().strip()
        except OSError:
            pattern = None
        places = default_places(pattern, os.getcwd())
    found = list_cores(places, with_coredumpctl=not dirs)
    if as_json:
        click.echo(json.dumps(dump_document(SCHEMA, found), indent=2))
    elif found.cores:
        for one in found.cores:
            rank = f" rank {one.rank}" if one.rank is not None else ""
            what = (
                f"pid {one.pid}{rank} {one.signal} {one.executable}"
                if one.pid is not None
                else ("unreadable core" if one.source == "file" else one.source)
            )
            size = f"{one.size / 1e6:.0f} MB" if one.size >= 1e6 else f"{one.size} B"
            click.echo(
                f"{_when(one.mtime)}  {what}  {size}  {one.path}" + (f"  ({one.note})" if one.note else "")
            )
    else:
        click.echo(
            "no core files in " + ", ".join(found.places) + " (rankscope core check: will there be one?)"
        )
    return ExitCode.OK if found.cores else ExitCode.NOTHING_FOUND

"""`rankscope core`: core files: backtraces of crashes and of hung processes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import click

from rankscope.cli.outfiles import FORCE_OPTION, OutDir
from rankscope.cli.progress import tty_progress
from rankscope.errors import ExitCode
from rankscope.serial import dump_document

HELP = """Core files: what crashed and where, for one core or one per rank.

\b
Examples:
  rankscope core bt core.4242                    # signal, crashing thread, frames, what it means
  rankscope core bt /tmp/cores/core.*            # one core per rank: the same crash grouped
  rankscope core bt core.4242 --out bug-report/  # full gdb and pystack text to attach to a bug report
  rankscope core check                           # will a crash here leave a core, and where?
  rankscope core list                            # the cores on this node, newest first
  rankscope core grab --job --dir /scratch/cores # cores of every rank of a hung job, in parallel
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
@click.argument("cores", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="CORE...")
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="The executable to read the cores with (default: the one each core records).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    default=120.0,
    show_default=True,
    help="Seconds per core.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Write the full text of each core here.",
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
    from rankscope.core.collect import backtraces
    from rankscope.core.render import full_text, render
    from rankscope.ranks import short_hostname

    out = OutDir(out_dir, force) if out_dir is not None else None
    from rankscope.lifetime import sigterm_raises

    progress = tty_progress(min_interval=0.25)
    try:
        with sigterm_raises():
            report = backtraces(list(cores), python, short_hostname(), timeout, progress=progress)
    finally:
        if progress is not None:
            progress.clear()
    document = dump_document(report)
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
    from rankscope.core.setup import read_setup, render

    setup = read_setup()
    if as_json:
        click.echo(json.dumps(dump_document(setup), indent=2))
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


@core.command("list", help=LIST_HELP)
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False), metavar="[DIR]...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.core.list/1).")
def list_cmd(dirs: tuple[str, ...], as_json: bool) -> int:
    from rankscope.core.listing import list_cores, places_to_look
    from rankscope.core.render import render_list

    found = list_cores(places_to_look(dirs), with_coredumpctl=not dirs)
    if as_json:
        click.echo(json.dumps(dump_document(found), indent=2))
    else:
        click.echo(render_list(found))
    return ExitCode.OK if found.cores else ExitCode.NOTHING_FOUND


GRAB_HELP = """Cores of live (hung) processes, for the ranks py-spy cannot explain: gcore of every
process at once (it stops each one for the few seconds it takes, then lets it go on), with a
deadline, after checking that the directory has room for them (their mapped memory, VmSize).
Files are DIR/core.PID, private (0600 from their first byte, written in a 0700 directory inside
DIR and moved in when whole: a core.PID is never partial). Stopped by Ctrl-C, SIGTERM or SIGKILL,
it leaves no gcore running, no process stopped and no partial core. Read them with rankscope core
bt; as root, hand one to the job's owner with install -o USER -m 0600 DIR/core.PID ~USER/.

--abort sends SIGABRT instead: the processes DIE and the kernel writes their cores where
kernel.core_pattern says (rankscope core check); each one's ulimit -c is raised to its hard limit
first. Nothing is asked: the flag is the consent.

\b
Examples:
  rankscope core grab 4242 4243
  rankscope core grab --job --dir /scratch/cores   # every rank of the job on this node
  rankscope core bt /scratch/cores/core.*          # then: where is each rank, grouped
  rankscope core grab --job --abort                # end the job, leaving kernel cores
"""


@core.command("grab", help=GRAB_HELP)
@click.argument("pids", nargs=-1, type=click.IntRange(min=1), metavar="[PID]...")
@click.option("--job", is_flag=True, help="Every worker of the distributed job(s) on this node.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    default=Path("."),
    show_default=True,
    help="Where gcore writes core.PID (created 0700 when missing).",
)
@click.option("--abort", is_flag=True, help="Kill the processes with SIGABRT: the kernel writes the cores.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    default=300.0,
    show_default=True,
    help="Seconds in all.",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=0),
    metavar="N",
    default=0,
    help="At most this many gcores at once (0: all).",
)
@click.option("--no-space-check", is_flag=True, help="Start even when --dir looks too small for the cores.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.core.grab/1).")
def grab(
    pids: tuple[int, ...],
    no_space_check: bool,
    job: bool,
    directory: Path,
    abort: bool,
    timeout: float,
    parallel: int,
    as_json: bool,
) -> int:
    from rankscope.core import grab as grabbing
    from rankscope.core.render import render_grab

    if bool(pids) == job:
        raise click.UsageError("name the processes: PID... or --job (not both)")
    targets = grabbing.targets_of(pids, job)
    if abort:
        from rankscope.core.setup import read_setup

        setup = read_setup()
        results = grabbing.abort_all(targets, min(timeout, 60.0), setup.where)
        report = grabbing.GrabReport("", "abort", 0, 0, results)
    else:
        free, needed = grabbing.make_room(directory, targets, space_check=not no_space_check)
        from rankscope.lifetime import sigterm_raises

        progress = tty_progress(min_interval=0.25)
        try:
            with sigterm_raises():  # gcores ended, partial cores removed, targets continued: exit 143
                results = grabbing.gcore_all(targets, str(directory), timeout, parallel, progress)
        finally:
            if progress is not None:
                progress.clear()
        report = grabbing.GrabReport(str(directory), "gcore", free, needed, results)
    if as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render_grab(report))
    failed = len(report.failed)
    if failed == 0:
        return ExitCode.OK
    return ExitCode.ALL_FAILED if failed == len(report.results) else ExitCode.PARTIAL

"""`rankscope logs ...`: read the console logs of many ranks."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Optional, Protocol

import click

from rankscope.cli.outfiles import FORCE_OPTION
from rankscope.cli.progress import tty_progress
from rankscope.errors import ErrorReport, ExitCode, NothingFoundError, RankscopeError
from rankscope.logs.demux import RankGrep
from rankscope.logs.reading import Reading
from rankscope.logs.sources import ReadSummary, discover

HOST_FROM_FILENAME = click.option(
    "--host-from-filename",
    is_flag=True,
    help="Per-node log files (node7.log, node8.log): ranks without a host in their prefix "
    "get the file name up to its first dot as host.",
)

LOGS_HELP = """Read the interleaved console logs of many ranks.

\b
Prefixes understood: torchrun --tee ([default0]: / [host:0]: with --role host:,
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE forms), torch's [rank3]:, srun --label (12: ),
Open MPI --tag-output ([1,12]<stdout>:), rankscope prefix ([host:3] ), and
torchrun --log-dir trees (attempt_N/<local_rank>/stderr.log).
Inputs: files, directories, .gz files (by content), or - for stdin.
Messy files are read and the report says how: runs of NUL bytes (copytruncate)
skipped, a truncated .gz read as far as it goes, lines over 4 MiB cut with their
rank kept, lines holding several ranks' unlocked writes split at their markers.

\b
Examples:
  rankscope logs errors job.log             # the root cause, then each distinct error once
  rankscope logs ranks job.log.gz           # which ranks wrote how many lines
  rankscope logs grep --rank node3:12 job.log
  rankscope logs split job.log --out per-rank/
  rankscope logs nccl job.log               # what NCCL_DEBUG=INFO output says
"""


@click.group(help=LOGS_HELP)
def logs() -> None:
    pass


@logs.result_callback()
def _stopped(code: Any, **_params: Any) -> Any:
    """A verb whose reading a signal ended printed what it had read: say so, and exit 130/143."""
    interrupted = click.get_current_context().meta.get(_INTERRUPTED)
    if not interrupted:
        return code
    from rankscope.cli.outcome import stopped_exit_code

    signum, name = interrupted
    click.echo(f"rankscope: interrupted by {name}: the result covers what was read until then", err=True)
    return stopped_exit_code(signum)


_INTERRUPTED = "rankscope.logs.interrupted"


@contextlib.contextmanager
def _reading(
    inputs: tuple[str, ...], host_from_filename: bool, show_progress: bool = True
) -> Iterator[Reading]:
    """The inputs to read, with a progress line on a terminal, erased when reading ends (or fails).

    Ctrl-C or SIGTERM while reading ends it at the next block: the verb reports what was read
    (a note says so) and exits 130 or 143.
    """
    from rankscope.lifetime import StopSignals

    progress = tty_progress(min_interval=0.25) if show_progress else None
    try:
        with StopSignals() as stop:
            reading = Reading(discover(inputs), host_from_filename, progress, stop=stop)
            click.get_current_context().meta[_READING] = reading
            yield reading
            if stop.signum:
                click.get_current_context().meta[_INTERRUPTED] = (stop.signum, stop.name)
    finally:
        if progress is not None:
            progress.clear()


class _Document(Protocol):
    """A ``rankscope.logs.*`` document: its class names the schema; ``read`` says what was read."""

    SCHEMA: ClassVar[str]
    read: ReadSummary


_EMITTED = "rankscope.logs.json_written"
_READING = "rankscope.logs.reading"


def _emit_json(document: _Document, reading: Reading, error: Optional[RankscopeError] = None) -> None:
    """Print a ``rankscope.logs.*`` document (its class names the schema), with what was read,
    and the error the verb ends with, if any (its exit code is the command's)."""
    from rankscope.serial import dump_document, to_json

    document.read = reading.summary()
    data = dump_document(document.SCHEMA, document)
    if error is not None:
        data["error"] = to_json(ErrorReport.of(error))
    click.echo(json.dumps(data, indent=2))
    click.get_current_context().meta[_EMITTED] = True


def _json_on_every_exit(verb: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """With ``--json``, a verb that ends in an error (nothing found, bad input) still prints one
    ``rankscope.logs.<verb>/1`` document: ``{"schema", "error": {"message", "hint", "exit_code"},
    "read"}`` (``read`` is null when reading never started), then exits with the error's code."""

    def wrap(command: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return command(*args, **kwargs)
            except RankscopeError as error:
                meta = click.get_current_context().meta
                if kwargs.get("as_json") and not meta.get(_EMITTED):
                    from rankscope.logs.reading import FailedDocument
                    from rankscope.serial import dump_document

                    reading = meta.get(_READING)
                    failed = FailedDocument(
                        ErrorReport.of(error), reading.summary() if reading is not None else None
                    )
                    click.echo(json.dumps(dump_document(f"rankscope.logs.{verb}/1", failed), indent=2))
                raise

        return run

    return wrap


def _read_notes(reading: Reading) -> list[str]:
    return reading.notes()


# ----------------------------------------------------------------------------- ranks


@logs.command(
    help="""Which hosts and ranks appear in the logs, with line counts and first/last timestamps.

\b
Examples:
  rankscope logs ranks job.log
  rankscope logs ranks torchrun-logs/ --json
"""
)
@click.argument("inputs", nargs=-1, required=True)
@HOST_FROM_FILENAME
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.logs.ranks/1).")
@_json_on_every_exit("ranks")
def ranks(inputs: tuple[str, ...], as_json: bool, host_from_filename: bool) -> int:
    from rankscope.logs.inventory import Inventory
    from rankscope.logs.labels import fold_labels

    with _reading(inputs, host_from_filename) as reading:
        inventory = Inventory().read(reading)
    reading.check_something_read()
    document = inventory.document()
    if as_json:
        _emit_json(document, reading)
        return ExitCode.OK
    labels = list(inventory.ranks)
    click.echo(f"{len(labels)} rank(s): {fold_labels(labels) or '-'}   {inventory.lines} lines")
    for row in document.ranks:
        times = f"  {row.first_time} .. {row.last_time}" if row.first_time else ""
        click.echo(f"  {row.label:>20}  {row.lines:>10} lines{times}")
    if inventory.unprefixed:
        click.echo(f"  {'(no rank prefix)':>20}  {inventory.unprefixed:>10} lines")
    for note in _read_notes(reading):
        click.echo(f"note: {note}")
    if not labels:
        click.echo(
            "note: no line carries a rank prefix; add one at the source: "
            "torchrun --role $(hostname -s): --tee 3, srun --label, mpirun --tag-output, "
            "or rankscope prefix -- CMD"
        )
    return ExitCode.OK


# ----------------------------------------------------------------------------- grep


@logs.command(
    help="""Print the lines of one or more ranks, prefix stripped (or kept with --keep-prefix).

\b
RANK is host:rank as printed by `logs ranks` (node3:12), a bare rank (12), or a folded set
(node[1-2]:[0-3]). Repeat --rank for several. A bare number is the global rank where
torch's [rankN]: markers say which label carries it (torchrun --role host: labels lines
with the node's local rank): `--rank 7` then prints [host:3]'s lines and says so on stderr.
Without markers it is the label as written; host:rank is always the label as written.

\b
--json prints one rankscope.logs.grep/1 document, written as the lines are found (memory
does not grow with the matches): ranks asked, how each matched, then every line with its
label, rank, file, line number and text, then what was read.

\b
Examples:
  rankscope logs grep --rank node3:12 job.log
  rankscope logs grep --rank 7 job.log        # global rank 7, whichever node ran it
  rankscope logs grep --rank 5 --keep-prefix job.log.gz | less
  rankscope logs grep --rank 7 job.log --json | jq -r '.lines[] | "\\(.file):\\(.line) \\(.text)"'
"""
)
@click.argument("inputs", nargs=-1, required=True)
@HOST_FROM_FILENAME
@click.option(
    "--rank", "ranks_", multiple=True, required=True, metavar="RANK", help="host:rank or rank; repeatable."
)
@click.option("--keep-prefix", is_flag=True, help="Print lines as they are, prefix included.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.logs.grep/1).")
@_json_on_every_exit("grep")
def grep(
    inputs: tuple[str, ...],
    ranks_: tuple[str, ...],
    keep_prefix: bool,
    host_from_filename: bool,
    as_json: bool,
) -> int:
    from rankscope.logs.demux import RankGrep
    from rankscope.logs.grep import how_matched, rank_labels

    wanted = rank_labels(ranks_)
    matched = _global_ranks(wanted, inputs, host_from_filename)
    global_of = {label: number for number, labels in matched.items() for label in labels}
    wanted.extend(global_of)
    finder = RankGrep(wanted, keep_prefix)
    ways = [how_matched(number, labels) for number, labels in matched.items()]
    if as_json:
        found, reading = _grep_json(finder, inputs, host_from_filename, ranks_, ways, global_of)
    else:
        for way in ways:
            click.echo(f"rankscope: {way}", err=True)
        found, reading = _grep_text(finder, inputs, host_from_filename)
    if not found:
        raise NothingFoundError(
            f"no lines of rank {', '.join(ranks_)} in {', '.join(inputs)}",
            "list the ranks present with: rankscope logs ranks " + " ".join(inputs),
        )
    return ExitCode.OK


def _global_ranks(
    wanted: list[bytes], inputs: tuple[str, ...], host_from_filename: bool
) -> dict[int, list[bytes]]:
    from rankscope.logs.grep import bare_numbers, global_ranks

    numbers = bare_numbers(wanted)
    if not numbers or "-" in inputs:  # stdin cannot be read twice
        return {}
    with _reading(inputs, host_from_filename, show_progress=False) as reading:
        return global_ranks(numbers, reading)


def _grep_text(finder: RankGrep, inputs: tuple[str, ...], host_from_filename: bool) -> tuple[int, Reading]:
    from rankscope.logs.grep import write_lines

    with _reading(inputs, host_from_filename, show_progress=False) as reading:  # lines go to the terminal
        found = write_lines(finder, reading, sys.stdout.buffer)
    reading.check_something_read()
    for note in _read_notes(reading):
        click.echo(f"rankscope: note: {note}", err=True)
    return found, reading


def _grep_json(
    finder: RankGrep,
    inputs: tuple[str, ...],
    host_from_filename: bool,
    ranks_: tuple[str, ...],
    ways: list[str],
    global_of: dict[bytes, int],
) -> tuple[int, Reading]:
    """Write the rankscope.logs.grep/1 document line by line: its ``lines`` array as found."""
    from rankscope.logs.grep import SCHEMA, GrepHead, found_lines
    from rankscope.serial import dump_document, to_json

    out = sys.stdout
    head = dump_document(SCHEMA, GrepHead(list(ranks_), ways))
    found = 0
    with _reading(inputs, host_from_filename, show_progress=False) as reading:
        # written once the inputs are found: a missing path ends in the error document alone
        out.write(json.dumps(head)[:-1] + ', "lines": [')
        for row in found_lines(finder, reading, global_of):
            out.write(("\n" if not found else "\n, ") + json.dumps(to_json(row)))
            found += 0 if row.continued else 1
    tail: dict[str, Any] = {"found": found}
    try:
        reading.check_something_read()
    except RankscopeError as error:
        tail["error"] = to_json(
            ErrorReport.of(error)
        )  # the document is already open: close it with the error
        raise
    finally:
        tail["read"] = to_json(reading.summary())
        out.write("\n], " + json.dumps(tail)[1:] + "\n")
        out.flush()
        click.get_current_context().meta[_EMITTED] = True
    return found, reading


# ----------------------------------------------------------------------------- split


@logs.command(
    help="""Write each rank's lines (prefix stripped) to its own file in DIR (mode 0700, files 0600).

\b
Files are named <host>_rank<N>.log (or <label>.log); lines without a prefix go to
unprefixed.log. Bytes other than letters, digits, '.', '_' and '-' are written %XX, so
every rank has its own file. An existing DIR must be empty unless --force.

\b
Examples:
  rankscope logs split job.log --out per-rank/
  rankscope logs split job.log --out per-rank/ --json
"""
)
@click.argument("inputs", nargs=-1, required=True)
@HOST_FROM_FILENAME
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Output directory.",
)
@FORCE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.logs.split/1).")
@_json_on_every_exit("split")
def split(
    inputs: tuple[str, ...], out_dir: Path, force: bool, as_json: bool, host_from_filename: bool
) -> int:
    from rankscope.cli.outfiles import OutDir, open_files_allowed
    from rankscope.logs.demux import SplitDocument, Splitter

    with _reading(inputs, host_from_filename) as reading, OutDir(out_dir, force) as out:

        def open_file(name: str, again: bool) -> BinaryIO:
            return os.fdopen(out.reopen(name) if again else out.open(name), "wb")

        splitter = Splitter(open_file, open_files_allowed())
        try:
            for opened in reading.sources():
                for chunk in opened.chunks:
                    splitter.feed(chunk, opened.labels, opened.continues)
        finally:
            splitter.close()
    reading.check_something_read()
    files = splitter.written(out_dir)
    if as_json:
        _emit_json(SplitDocument(str(out_dir), files), reading)
        return ExitCode.OK
    click.echo(f"wrote {len(files)} file(s) to {out_dir}/")
    for row in files:
        name = Path(row.file).name
        click.echo(f"  {name:>28}  {row.lines:>10} lines  ({row.label or 'no rank prefix'})")
    for note in _read_notes(reading):
        click.echo(f"note: {note}")
    return ExitCode.OK


# ----------------------------------------------------------------------------- errors


@logs.command(
    help="""Rebuild every rank's tracebacks from interleaved lines, name the root cause, and print
each distinct error once with its ranks and hosts.

\b
The first line names the root cause, weighed over every kind of evidence (strongest
first): NCCL WARN lines of a failed CUDA/network call, tracebacks and rank-prefixed exception
lines, native crash backtraces, launchers reporting a death by signal (SIGKILL: OOM killer
or scheduler), watchdog timeouts and desyncs, cut tracebacks, a launcher's summary alone.
Among tracebacks: the first fatal culprit (by timestamp where the lines carry one, else by
log order), its ranks, exception, the user's own frame, and why.
Each error has a role:
  culprit   the rank's own error, a candidate root cause
  victim    a consequence of another failure: lost peer (gloo "Connection closed by
            peer"), NCCL remote error or watchdog timeout, socket timeout, a signal
  handled   caught: the same rank wrote 100+ more lines after it, or a later traceback
CUDA errors reported asynchronously are flagged with the CUDA_LAUNCH_BLOCKING=1 rerun;
device-side assertion lines are folded; out-of-memory errors show asked, capacity, free.

\b
Errors are the same when type, message (numbers, addresses, IPs, host names and
site-packages paths normalised), frames and whether it was caught agree.

\b
Examples:
  rankscope logs errors job.log
  rankscope logs errors job.log --json | jq .root_cause
  rankscope logs errors job.log --json | jq .verdict       # any kind of evidence
  rankscope logs errors torchrun-logs/ --json
  srun --label python train.py 2>&1 | rankscope logs errors -
"""
)
@click.argument("inputs", nargs=-1, required=True)
@HOST_FROM_FILENAME
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.logs.errors/1).")
@click.option("--frames", default=6, show_default=True, metavar="N", help="Innermost frames shown per error.")
@_json_on_every_exit("errors")
def errors(inputs: tuple[str, ...], as_json: bool, frames: int, host_from_filename: bool) -> int:
    from rankscope.logs.errors_report import errors_document, render_errors, scan_errors

    with _reading(inputs, host_from_filename) as reading:
        report, counts = scan_errors(reading)
    reading.check_something_read()
    if as_json:
        _emit_json(errors_document(report, counts), reading)
    else:
        click.echo(render_errors(report, counts, frames, _read_notes(reading)))
    return ExitCode.OK


# ----------------------------------------------------------------------------- nccl


@logs.command(
    help="""Summarise NCCL_DEBUG=INFO output and explain known failures.

\b
Per rank: NCCL version, network (IB/Socket), interface, channels, transports (P2P/SHM/NET),
GPU (cudaDev, busId) and whether init completed. Then findings, each with its rule, ranks,
cause, fix and the lines that show it (file:line): an NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME/
NCCL_IB_HCA that matches nothing (with the interfaces that exist), two ranks on one GPU,
different NCCL versions, InfiniBand present but sockets used, /dev/shm too small, refused or
failed connections, watchdog timeouts, peers that exited, IB completion errors, other WARNs.
When the log ran on this host, its interfaces and /dev/infiniband are looked at too.

\b
Examples:
  NCCL_DEBUG=INFO torchrun ... 2>&1 | tee job.log; rankscope logs nccl job.log
  rankscope logs nccl node*.log --json
  rankscope logs nccl job.log --json | jq '.findings[] | {kind, ranks, next_step}'
"""
)
@click.argument("inputs", nargs=-1, required=True)
@HOST_FROM_FILENAME
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema rankscope.logs.nccl/1).")
@_json_on_every_exit("nccl")
def nccl(inputs: tuple[str, ...], as_json: bool, host_from_filename: bool) -> int:
    from rankscope.logs.nccl import NcclScan, render_nccl
    from rankscope.logs.nccl_host import read_host_facts

    with _reading(inputs, host_from_filename) as reading:
        scan = NcclScan().read(reading)
    reading.check_something_read()
    result = scan.result(read_host_facts())
    if not result.ranks and not result.findings:
        error = NothingFoundError(
            f"no NCCL lines in {', '.join(inputs)}",
            "run the job with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) and keep its output",
        )
        if as_json:
            _emit_json(result, reading, error)
        raise error
    if as_json:
        _emit_json(result, reading)
    else:
        click.echo(render_nccl(result, _read_notes(reading)))
    return ExitCode.OK

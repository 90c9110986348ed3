"""`rankscope logs ...`: read the console logs of many ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import click

from rankscope.cli.logs_common import (
    HOST_FROM_FILENAME,
    INTERRUPTED,
    emit_json,
    json_on_every_exit,
    reading_of,
)
from rankscope.cli.logs_grep import grep
from rankscope.cli.outfiles import FORCE_OPTION
from rankscope.errors import ExitCode, NothingFoundError

LOGS_HELP = """Read the interleaved console logs of many ranks.

\b
Prefixes understood: torchrun --tee ([default0]: / [host:0]: with --role host:,
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE forms), torch's [rank3]:, srun --label (12: ),
Open MPI --tag-output ([1,12]<stdout>:), rankscope prefix ([host:3] ), and
torchrun --log-dir trees (attempt_N/<local_rank>/stderr.log).
Inputs: files, directories, .gz files (by content), or - for stdin.
Messy files are read and the report says how: runs of NUL bytes (copytruncate)
skipped, a truncated .gz read as far as it goes, lines over 4 MiB cut with their
rank kept, lines holding several ranks' unlocked writes split at their markers,
a paste cut at a terminal's width joined back into its lines.

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
    interrupted = click.get_current_context().meta.get(INTERRUPTED)
    if not interrupted:
        return code
    from rankscope.cli.outcome import stopped_exit_code

    signum, name = interrupted
    click.echo(f"rankscope: interrupted by {name}: the result covers what was read until then", err=True)
    return stopped_exit_code(signum)


logs.add_command(grep)


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
@json_on_every_exit("ranks")
def ranks(inputs: tuple[str, ...], as_json: bool, host_from_filename: bool) -> int:
    from rankscope.logs.inventory import Inventory
    from rankscope.logs.render import render_ranks

    with reading_of(inputs, host_from_filename) as reading:
        inventory = Inventory().read(reading)
    reading.check_something_read()
    document = inventory.document()
    if as_json:
        emit_json(document, reading)
    else:
        click.echo(render_ranks(inventory, document, reading.notes()))
    return ExitCode.OK


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
@json_on_every_exit("split")
def split(
    inputs: tuple[str, ...], out_dir: Path, force: bool, as_json: bool, host_from_filename: bool
) -> int:
    from rankscope.cli.outfiles import OutDir, open_files_allowed
    from rankscope.logs.demux import SplitDocument, Splitter
    from rankscope.logs.render import render_split

    with reading_of(inputs, host_from_filename) as reading, OutDir(out_dir, force) as out:

        def open_file(name: str, again: bool) -> BinaryIO:
            return os.fdopen(out.reopen(name) if again else out.open(name), "wb")

        splitter = Splitter(open_file, open_files_allowed())
        splitter.split(reading.sources())
    reading.check_something_read()
    files = splitter.written(out_dir)
    if as_json:
        emit_json(SplitDocument(str(out_dir), files), reading)
    else:
        click.echo(render_split(out_dir, files, reading.notes()))
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
Among tracebacks: the first fatal culprit (in log order within a file; across files by
timestamp where the lines carry one), its ranks, exception, the user's own frame, and why.
Each error has a role:
  culprit   the rank's own error, a candidate root cause
  victim    a consequence of another failure: lost peer (gloo "Connection closed by
            peer"), NCCL remote error or watchdog timeout, socket timeout, a signal
  handled   caught: the same rank wrote 100+ more lines after it, a later traceback, or a
            logger printed it and the rank wrote on
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
@json_on_every_exit("errors")
def errors(inputs: tuple[str, ...], as_json: bool, frames: int, host_from_filename: bool) -> int:
    from rankscope.logs.collect import scan_errors
    from rankscope.logs.render import render_errors
    from rankscope.logs.report import errors_document

    with reading_of(inputs, host_from_filename) as reading:
        report, counts = scan_errors(reading)
    reading.check_something_read()
    if as_json:
        emit_json(errors_document(report, counts), reading)
    else:
        click.echo(render_errors(report, counts, frames, reading.notes()))
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
@json_on_every_exit("nccl")
def nccl(inputs: tuple[str, ...], as_json: bool, host_from_filename: bool) -> int:
    from rankscope.logs.nccl import NcclScan, render_nccl
    from rankscope.logs.nccl_host import read_host_facts

    with reading_of(inputs, host_from_filename) as reading:
        scan = NcclScan().read(reading)
    reading.check_something_read()
    result = scan.result(read_host_facts())
    if not result.ranks and not result.findings:
        error = NothingFoundError(
            f"no NCCL lines in {', '.join(inputs)}",
            "run the job with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) and keep its output",
        )
        if as_json:
            emit_json(result, reading, error)
        raise error
    if as_json:
        emit_json(result, reading)
    else:
        click.echo(render_nccl(result, reading.notes()))
    return ExitCode.OK

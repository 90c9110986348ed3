"""`rankscope trace`: run a program traced into per-process ring files, and read those files."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.pictures import HTML_OPTION, check_page_path, write_page
from rankscope.errors import ExitCode, RankscopeError
from rankscope.serial import dump_document

HELP = """Trace where each rank is: calls and returns of your own code (or periodic stack samples)
into one fixed-size, memory-mapped ring file per process, so the last events survive a hang,
SIGKILL or a crash. Then read every rank's file at once.

\b
Examples:
  torchrun --nproc-per-node 8 --no-python rankscope trace run --out traces -- train.py --lr 3e-4
  srun rankscope trace run --out traces --include torch.distributed -- train.py
  rankscope trace run --sample 10 --out traces -- train.py   # stacks every 10 ms, ~no overhead
  rankscope trace tail traces -n 5            # where each rank stopped, ranks grouped
  rankscope trace grep all_reduce traces      # matches per file, with counts
  rankscope trace show traces/trace-node1-3-4242
  rankscope trace export traces --out job.json   # open in ui.perfetto.dev or chrome://tracing
"""

EXPORT_HELP = """Write every trace file under DIR as one Chrome trace-event JSON file, which Perfetto
(ui.perfetto.dev, offline too) and chrome://tracing open: a process track per rank, named with
its rank and host; a thread track per thread; a slice per call; rankscope.progress steps as
instant events; the calls still open at the end of a ring as slices that did not end. Ranks of
several hosts are aligned on wall-clock time; where the rings recorded the same collectives
(--include torch.distributed), each host's clock skew against the first is measured and shown.

\b
Examples:
  rankscope trace export traces --out job.json
  rankscope trace export traces/trace-node1-3-4242 --out rank3.json
  rankscope trace export traces --out job.json --html job.html   # + a timeline page, offline

With --html FILE the same events are also drawn as one self-contained page (nothing fetched):
one row per rank (host:rank), the longest calls as bars on the wall-clock axis, nested calls in
sub-rows, the calls still open at the end drawn to the ring's end and marked, progress steps as
ticks, the clock skew noted.

The file is written 0600 and renamed into place when complete. Exit 0; 4 when some trace files
could not be read (listed on stderr, the others exported); 8 when none could.
"""

RUN_HELP = """Run SCRIPT (with its ARGS) traced, as `python SCRIPT ARGS` would run it.

Writes trace-{host}-{rank}-{pid} into --out. By default the calls and returns of your own code
(not the standard library, site-packages or rankscope), the last --ring-size of them.

\b
Examples:
  torchrun --nproc-per-node 4 --no-python rankscope trace run --out traces -- train.py
  rankscope trace run --include torch.distributed --lines -- train.py
  rankscope trace run --full --out traces -- train.py      # every event (the file grows)
  rankscope trace run --sample 10 -- train.py             # stack samples only
  rankscope trace run --sample 50 --calls -- train.py     # both

The file's disk space is reserved when tracing starts: where --out has no room, one line says so
and the program runs untraced; a --full trace that fills the disk switches itself off. Either
way the program's own exit code is returned.
"""


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    scale = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    if not digits.isdigit() or int(digits) <= 0:
        raise click.BadParameter(f"{text!r}: a size like 6M, 512K or 1G")
    return int(digits) * scale


@dataclass(frozen=True)
class RunRequest:
    script: str
    args: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    lines: bool = False
    full: bool = False
    sample: Optional[float] = None
    calls: bool = False
    out: str = "."
    ring_size: str = "6M"


@click.group(help=HELP)
def trace() -> None:
    pass


@trace.command("run", help=RUN_HELP, context_settings={"ignore_unknown_options": True})
@click.option(
    "--include", multiple=True, metavar="PKG", help="Also trace this package (repeatable): torch.distributed."
)
@click.option("--lines", is_flag=True, help="Line events too (slower).")
@click.option(
    "--full", is_flag=True, help="Keep every event (the file grows) instead of the last --ring-size."
)
@click.option(
    "--sample", type=click.FloatRange(min=0.1), metavar="MS", help="Record every thread's stack every MS ms."
)
@click.option("--calls", is_flag=True, help="With --sample: trace calls as well.")
@click.option(
    "--out",
    default=".",
    metavar="DIR",
    show_default=True,
    help="Directory for the trace files (created 0700).",
)
@click.option(
    "--ring-size",
    default="6M",
    metavar="SIZE",
    show_default=True,
    help="Ring bytes per process (24 B a record).",
)
@click.argument("script", metavar="SCRIPT")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(**params: Any) -> int:
    from rankscope.cli.params import from_params

    request = from_params(RunRequest, params)
    return run_script(request)


def run_script(request: RunRequest) -> int:
    """Trace the script in this process (torchrun --no-python starts rankscope as the worker)."""
    from rankscope.trace import format as fmt
    from rankscope.trace.run import run_traced

    return run_traced(
        request.script,
        request.args,
        out=request.out,
        include=request.include,
        lines=request.lines,
        full=request.full,
        sample_ms=request.sample,
        calls=request.calls,
        ring_records=_size(request.ring_size) // fmt.RECORD_BYTES,
        warn=lambda text: click.echo(text, err=True),
    )


def _each_file(target: str, read: Callable[[Any], Any]) -> tuple[list[Any], tuple[Any, ...]]:
    from rankscope.trace.collect import read_each

    return read_each(target, read)


@trace.command("tail")
@click.argument("target", metavar="DIR")
@click.option(
    "-n",
    "n",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Events shown per group.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.trace.tail document.")
def tail_cmd(target: str, n: int, as_json: bool) -> int:
    """Where every process stopped: the last events of each trace file, files that stopped at
    the same place grouped with their ranks folded ([0-6] train.py:88 step). Only the end of
    each file is decoded."""
    from rankscope.trace.analyse import tail
    from rankscope.trace.decode import read_tail
    from rankscope.trace.render import render_tail

    traces, bad = _each_file(target, lambda f: read_tail(f.layout, f.source, max(n, 1)))
    _print(tail(traces, n, bad), render_tail, as_json)
    return ExitCode.PARTIAL if bad else ExitCode.OK


@trace.command("grep")
@click.argument("pattern")
@click.argument("target", metavar="DIR")
@click.option(
    "-n",
    "n",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Last matches shown per file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.trace.grep document.")
def grep_cmd(pattern: str, target: str, n: int, as_json: bool) -> int:
    """Events matching PATTERN (a regular expression over `KIND file:line function`), counted per file."""
    import re

    from rankscope.trace.analyse import GrepReport, grep_file
    from rankscope.trace.decode import iter_events
    from rankscope.trace.render import render_grep

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise click.BadParameter(f"{pattern!r}: {exc}", param_hint="PATTERN") from None

    def one(opened: Any) -> Any:
        return grep_file(regex, *iter_events(opened.layout, opened.source), n)

    files, bad = _each_file(target, one)
    _print(GrepReport(pattern, tuple(files), bad), render_grep, as_json)
    return ExitCode.PARTIAL if bad else ExitCode.OK


@trace.command("show")
@click.argument("path", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.trace.show document.")
def show_cmd(path: str, as_json: bool) -> int:
    """Decode one trace file: every event, oldest first, indented by call depth (printed as it is
    read: memory does not grow with the file)."""
    from rankscope.trace.collect import open_trace
    from rankscope.trace.decode import iter_events
    from rankscope.trace.render import show_lines

    if not os.path.lexists(path):
        raise RankscopeError(f"{path}: no such file", "pass one trace-* file", ExitCode.BAD_INPUT)
    with open_trace(Path(path)) as opened:
        head, events = iter_events(opened.layout, opened.source)
        if as_json:
            _stream_json(dump_document(head), events)
        else:
            _stream(show_lines(head, events))
    return ExitCode.OK


def _stream(lines: Iterator[str]) -> bool:
    """Lines to stdout a batch at a time; False when the reader went away (``| head``): decoding
    stops there and the command ends as a closed pipe ends the other verbs (exit 0)."""
    batch: list[str] = []
    try:
        for line in lines:
            batch.append(line)
            if len(batch) >= 4096:
                click.echo("\n".join(batch))
                batch.clear()
        if batch:
            click.echo("\n".join(batch))
        return True
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # what is still buffered goes nowhere at exit
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False


def _stream_json(head: dict[str, Any], events: Iterator[Any]) -> None:
    """The show document with its events written one per line as they are decoded."""
    from rankscope.serial import to_json

    head = {k: v for k, v in head.items() if k != "events"}
    text = json.dumps(head, indent=2)
    opening = text[: text.rindex("}")].rstrip() + ',\n  "events": ['
    lines = (("    " if i == 0 else "    ,") + json.dumps(to_json(event)) for i, event in enumerate(events))
    if _stream(iter([opening])) and _stream(lines):
        _stream(iter(["  ]\n}"]))


def _print(report: Any, render: Callable[[Any], str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render(report), nl=False)


@trace.command("export", help=EXPORT_HELP)
@click.argument("target", metavar="DIR")
@click.option("--out", "out", required=True, metavar="FILE.json", help="The trace-event JSON file to write.")
@HTML_OPTION
def export_cmd(target: str, out: str, html: Optional[Path]) -> int:
    from rankscope.trace.export_write import export

    check_page_path(html)
    timeline = None
    if html is not None:
        from rankscope.pictures.timeline_page import TimelineBuilder

        timeline = TimelineBuilder()
    result = export(target, out, timeline)
    if html is not None and timeline is not None:
        from rankscope.pictures.timeline_page import export_page

        write_page(html, export_page(result, timeline, target))
    skew = "".join(f", clock of {s.host} {s.ms:+.3f} ms vs {s.reference}" for s in result.skew)
    click.echo(
        f"{result.out}: {result.events} events of {result.files} trace files, "
        f"{result.open_calls} calls still open at the end{skew}"
    )
    for bad in result.unreadable:
        click.echo(f"unreadable: {bad.path}: {bad.reason}", err=True)
    return ExitCode.PARTIAL if result.unreadable else ExitCode.OK

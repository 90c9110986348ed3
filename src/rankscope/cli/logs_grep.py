"""`rankscope logs grep`: the lines of one or more ranks, as text or as the streamed
``rankscope.logs.grep/1`` document."""

from __future__ import annotations

import sys

import click

from rankscope.cli.logs_common import EMITTED, HOST_FROM_FILENAME, json_on_every_exit, reading_of
from rankscope.errors import ExitCode, NothingFoundError
from rankscope.logs.demux import RankGrep


@click.command(
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
@json_on_every_exit("grep")
def grep(
    inputs: tuple[str, ...],
    ranks_: tuple[str, ...],
    keep_prefix: bool,
    host_from_filename: bool,
    as_json: bool,
) -> int:
    from rankscope.logs.grep import how_matched, rank_labels

    wanted = rank_labels(ranks_)
    matched = _global_ranks(wanted, inputs, host_from_filename)
    global_of = {label: number for number, labels in matched.items() for label in labels}
    wanted.extend(global_of)
    finder = RankGrep(wanted, keep_prefix)
    ways = [how_matched(number, labels) for number, labels in matched.items()]
    if as_json:
        found = _grep_json(finder, inputs, host_from_filename, ranks_, ways, global_of)
    else:
        for way in ways:
            click.echo(f"rankscope: {way}", err=True)
        found = _grep_text(finder, inputs, host_from_filename)
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
    with reading_of(inputs, host_from_filename, show_progress=False) as reading:
        return global_ranks(numbers, reading)


def _grep_text(finder: RankGrep, inputs: tuple[str, ...], host_from_filename: bool) -> int:
    from rankscope.logs.grep import write_lines

    with reading_of(inputs, host_from_filename, show_progress=False) as reading:  # lines go to the terminal
        found = write_lines(finder, reading, sys.stdout.buffer)
    reading.check_something_read()
    for note in reading.notes():
        click.echo(f"rankscope: note: {note}", err=True)
    return found


def _grep_json(
    finder: RankGrep,
    inputs: tuple[str, ...],
    host_from_filename: bool,
    ranks_: tuple[str, ...],
    ways: list[str],
    global_of: dict[bytes, int],
) -> int:
    """The rankscope.logs.grep/1 document, written line by line: its ``lines`` array as found."""
    from rankscope.logs.grep import GrepDocument, found_lines

    document = GrepDocument(sys.stdout, list(ranks_), ways)
    with reading_of(inputs, host_from_filename, show_progress=False) as reading:
        document.write_lines(found_lines(finder, reading, global_of))
    try:
        document.close(reading)
    finally:
        click.get_current_context().meta[EMITTED] = True
    return document.found

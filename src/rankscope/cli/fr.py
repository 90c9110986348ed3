"""`rankscope fr`: every rank's flight recorder, aligned across ranks: the first collective they disagree on."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.cli.pictures import HTML_OPTION, check_page_path
from rankscope.errors import ExitCode
from rankscope.fr.align import ENABLE_HINT
from rankscope.fr.analyse import analyse_dumps
from rankscope.fr.records import DEFAULT_LIMITS, Limits
from rankscope.fr.render import render_text
from rankscope.fr.report import FrReport, report_document

HELP = """Read every rank's PyTorch flight-recorder dump and name the first collective the
ranks disagree on: an extra or skipped collective, all_reduce against barrier, other sizes or
dtypes, the same collective issued from different lines, sends and receives that do not pair,
ranks that never issued what the others wait in. Each side is named with the call that issued it.
Ranks whose dump is missing are named first.

DUMPS is a directory of dumps or the prefix torch writes them under (TORCH_FR_DUMP_TEMP_FILE):
files PREFIX<rank>, pickle (with frames) or JSON, any torch version's layout.

\b
Examples:
  rankscope fr /tmp/fr/                       # every dump in a directory
  rankscope fr /tmp/nccl_trace_rank_          # the files of a prefix
  rankscope fr /tmp/fr/ --json                # machine-readable (schema rankscope.fr/1)
  rankscope fr /tmp/fr/ --ras ncclras.txt     # and NCCL's RAS report beside it
  rankscope fr /tmp/fr/ --html fr.html        # + a page: every group and rank around the divergence
  rankscope fr /tmp/fr/ --max-mib 64 --max-entries 50000   # read bigger dumps whole
  rankscope stacks --fr /tmp/fr/              # the verdict above the live stacks

\b
Record with (every rank's environment):
  TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_
"""


@dataclass(frozen=True)
class FrRequest:
    dumps: Path
    as_json: bool = False
    ras: Optional[Path] = None
    world_size: Optional[int] = None
    max_mib: int = DEFAULT_LIMITS.max_bytes >> 20
    max_entries: int = DEFAULT_LIMITS.max_entries
    max_frames: int = DEFAULT_LIMITS.max_frames
    html: Optional[Path] = None

    def limits(self) -> Limits:
        return replace(
            DEFAULT_LIMITS,
            max_bytes=self.max_mib << 20,
            max_entries=self.max_entries,
            max_frames=self.max_frames,
        )


def exit_code_of(report: FrReport) -> int:
    if report.empty:
        return int(ExitCode.NOTHING_FOUND)
    if report.desync:
        return int(ExitCode.DESYNC)
    if report.absent or report.unreadable:
        return int(ExitCode.PARTIAL)
    return int(ExitCode.OK)


@click.command(help=HELP)
@click.argument("dumps", type=click.Path(path_type=Path), metavar="DUMPS")
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.fr document.")
@click.option(
    "--ras",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="NCCL RAS output (`ncclras` > FILE) to join with the records.",
)
@click.option(
    "--world-size",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="The job's world size, when the last ranks left no dump (else told from the dumps).",
)
@click.option(
    "--max-mib",
    type=click.IntRange(1, 1 << 16),
    default=DEFAULT_LIMITS.max_bytes >> 20,
    show_default=True,
    metavar="N",
    help="A dump file larger than N MiB is not read (it is named).",
)
@click.option(
    "--max-entries",
    type=click.IntRange(1),
    default=DEFAULT_LIMITS.max_entries,
    show_default=True,
    metavar="N",
    help="Keep each dump's last N entries (what is cut is said).",
)
@click.option(
    "--max-frames",
    type=click.IntRange(1),
    default=DEFAULT_LIMITS.max_frames,
    show_default=True,
    metavar="N",
    help="Keep each entry's innermost N frames.",
)
@HTML_OPTION
def fr(**params: Any) -> int:
    request = from_params(FrRequest, params)
    check_page_path(request.html)
    report, dumps = analyse_dumps(request.dumps, request.ras, request.world_size, request.limits())
    if request.as_json:
        click.echo(json.dumps(report_document(report), indent=2))
    else:
        click.echo(render_text(report, str(request.dumps)), nl=False)
        if report.empty and not report.recorder_on:
            click.echo(f"rankscope: the flight recorder was not enabled — {ENABLE_HINT}", err=True)
    if request.html is not None:
        from rankscope.cli.pictures import write_page
        from rankscope.pictures.fr_page import fr_page

        write_page(request.html, fr_page(report, str(request.dumps), dumps))
    return exit_code_of(report)

"""``--html FILE`` and ``--folded``: the options, and the one writer of a page file (docs/pictures.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rankscope.errors import BadInputError

if TYPE_CHECKING:
    from rankscope.pictures.page import Page
    from rankscope.stacks.collect import DumpOutcome
    from rankscope.stacks.report import Diagnosis, StacksReport

HTML_OPTION = click.option(
    "--html",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write the report as one self-contained HTML page (pictures; nothing fetched; mode 0600).",
)

FOLDED_OPTION = click.option(
    "--folded",
    is_flag=True,
    help="Print collapsed stacks (frame;frame;... COUNT, for flamegraph.pl, inferno, speedscope) instead "
    "of the report: count = ranks, or rank-samples with --samples.",
)


def write_page(path: Path, page: Page) -> None:
    """The page as ``path``: a new file of mode 0600, never written through a symbolic link (a
    regular file of that name is replaced; a link or anything else is refused)."""
    from rankscope.cli.outfiles import OutDir
    from rankscope.pictures.html import render_html

    text = render_html(page)
    try:
        with OutDir(path.parent, force=True) as out:
            out.write(path.name, text)
    except BadInputError as err:
        raise BadInputError(err.message, "pass --html a file of yours") from None
    sys.stderr.write(f"rankscope: page written to {path}\n")


def write_stacks_page(
    path: Path, report: StacksReport, diagnosis: Diagnosis, full: bool, above: Sequence[str], verdict: Any
) -> None:
    from rankscope.pictures.stacks_page import stacks_page

    write_page(path, stacks_page(report, diagnosis, full=full, above=above, fr=verdict))


def folded_text(report: StacksReport, full: bool, outcomes: Sequence[tuple[int, DumpOutcome]] = ()) -> str:
    """The collapsed stacks of a report; with several samples taken here, of every sample."""
    from rankscope.pictures.folded import folded_lines

    samples: Sequence[Any] = [report.groups]
    if report.samples > 1 and outcomes:
        from rankscope.stacks.merge import group_snapshots

        by_sample: dict[int, list[Any]] = {}
        for index, outcome in outcomes:
            if outcome.snapshot is not None:
                by_sample.setdefault(index, []).append(outcome.snapshot)
        samples = [group_snapshots(snapshots) for _, snapshots in sorted(by_sample.items())]
    lines = folded_lines(samples, full)
    return "\n".join(lines) + "\n" if lines else ""


def check_page_path(path: Path | None) -> None:
    """Refuse a bad ``--html FILE`` before any work is done: a link, a directory, a parent that is not one."""
    if path is None:
        return
    import os
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise BadInputError(
            f"cannot write {path}: {err.strerror or err}", "pass --html a file of yours"
        ) from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise BadInputError(
            f"cannot write {path}: it is a symbolic link; rankscope does not write through links",
            "pass --html a file of yours",
        )
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise BadInputError(f"cannot write {path}: it is not a regular file", "pass --html a file of yours")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise BadInputError(
            f"cannot write {path}: {parent} is not a directory", "pass --html a file of yours"
        )

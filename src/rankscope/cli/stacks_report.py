"""The local half of `rankscope stacks`: collect on this node, diagnose, print or save.

Free of click, so a plain run (rankscope.cli.plain) can go straight here from the console
script; the click command (rankscope.cli.stacks) calls the same `report_local`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

from rankscope.errors import ExitCode
from rankscope.stacks.explain import diagnose
from rankscope.stacks.local import StacksOptions, exit_code_for, run_local, save_outputs
from rankscope.stacks.render import render_text
from rankscope.stacks.report import report_document

if TYPE_CHECKING:
    from rankscope.cli.plain import PlainStacks

NOTHING_FOUND = (
    "rankscope: error: no distributed job found on this node (no torchrun/deepspeed/accelerate/mpirun/srun "
    "workers with a rank) — name a process with --pid PID, or use --all-python"
)


def progress_printer() -> Optional[Callable[[str], None]]:
    """A one-line progress display on stderr when it is a terminal, else None."""
    if not sys.stderr.isatty():
        return None

    def show(message: str) -> None:
        sys.stderr.write(f"\r\033[K{message}")
        sys.stderr.flush()

    return show


def report_local(
    options: StacksOptions, as_json: bool, out_dir: Optional[str], full: bool, color: Optional[bool]
) -> int:
    """Run the local pipeline and print its report; returns the exit code (docs/exit-codes.md)."""
    progress = progress_printer()
    result = run_local(options, progress=progress)
    if progress is not None:
        progress("")
    report = result.report
    diagnosis = report.diagnosis = diagnose(report)
    document = report_document(report) if as_json or out_dir is not None else {}
    text = render_text(report, diagnosis, full=full, color=False)
    code = exit_code_for(report)
    out = sys.stdout
    if code == ExitCode.NOTHING_FOUND and not as_json:
        sys.stderr.write(NOTHING_FOUND + "\n")
        return int(code)
    if out_dir is not None:
        from pathlib import Path

        save_outputs(Path(out_dir), result, document, text)
    if as_json:
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        use_color = out.isatty() if color is None else color
        out.write(render_text(report, diagnosis, full=full, color=use_color) if use_color else text)
        if out_dir is not None:
            out.write(f"\nraw dumps, stacks.json and report.txt: {out_dir}/\n")
    out.flush()
    if code in (ExitCode.ALL_FAILED, ExitCode.PERMISSION_DENIED, ExitCode.BAD_INPUT) and report.failures:
        first = report.failures[0]
        sys.stderr.write(f"rankscope: error: {first.target}: {first.reason} — {first.hint}\n")
    return int(code)


def run_plain(plain: PlainStacks) -> int:
    """A plain `rankscope stacks` run, parsed by rankscope.cli.plain."""
    options = StacksOptions(
        pids=plain.pids,
        native=plain.native,
        with_locals=plain.with_locals,
        timeout=plain.timeout,
        deadline=plain.deadline,
    )
    return report_local(options, plain.as_json, plain.out, plain.full, plain.color)

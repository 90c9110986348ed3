"""The capture: one command, run as a child with a deadline, whose JSON document holds the verdict.

The command is ``rankscope why --pid PID --out CAPTURE_DIR --json`` (``--jobid J`` for a SLURM job: every node) (``why`` writes its bundle into
the capture directory and prints its document). A rankscope without the ``why`` verb runs
``rankscope stacks --pid PID --out CAPTURE_DIR/stacks --json`` instead; the caller says which
(``verb``: the command line knows its verbs). Either document is read the same way
(:func:`verdict_of`): the sentence a person reads first, and the culprit ranks.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rankscope import lifetime
from rankscope.watch.index import write_private

#: The verbs that can capture, best first.
WHY = "why"
STACKS = "stacks"


@dataclass
class CaptureResult:
    """What one capture left: its directory, the command's exit code and document, the verdict."""

    directory: Path
    verb: str
    argv: list[str]
    returncode: Optional[int]
    timed_out: bool = False
    document: Any = None
    verdict: str = ""
    #: The culprit ranks the document names (empty when it names none).
    ranks: list[int] = field(default_factory=list)
    #: The command's stderr (its last lines), for a capture that went wrong.
    errors: str = ""


def capture_argv(verb: str, targets: list[str], directory: Path) -> list[str]:
    """``targets``: the words that name the job (``--pid N`` for each launcher, or ``--jobid J``)."""
    command = [sys.executable, "-m", "rankscope"]
    if verb == WHY:
        return [*command, WHY, *targets, "--out", str(directory), "--json"]
    return [*command, STACKS, *targets, "--out", str(directory / "stacks"), "--json"]


def run_capture(
    verb: str, targets: list[str], directory: Path, deadline: float, stop_fd: int = -1
) -> CaptureResult:
    """Run the capture of the job ``targets`` names (see :func:`capture_argv`) into ``directory`` (new and empty) within ``deadline`` seconds.

    Its stdout (the JSON document) is read up to lifetime's bound; its stderr goes to an unnamed
    private file and is kept in the result. The child, and what it starts (py-spy), end with the
    deadline, on ``stop_fd`` and with rankscope.
    """
    argv = capture_argv(verb, targets, directory)
    with tempfile.TemporaryFile() as errors:
        child = lifetime.run(argv, deadline, stop_fd=stop_fd, stderr=errors)
        errors.seek(0)
        stderr = errors.read()[-4096:].decode("utf-8", "replace")
    result = CaptureResult(directory, verb, argv, child.returncode, child.timed_out, errors=stderr)
    try:
        result.document = json.loads(child.text())
    except ValueError:
        result.document = None
    result.verdict, result.ranks = verdict_of(result.document)
    if not result.verdict:
        last = stderr.strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
        result.verdict = f"no verdict ({'timed out' if child.timed_out else last[0]})"
    return result


def verdict_of(document: Any) -> tuple[str, list[int]]:
    """The verdict sentence and culprit ranks of a ``why`` or a ``stacks`` document ("" and [] when none)."""
    if not isinstance(document, dict):
        return "", []
    verdict = document.get("verdict")
    if isinstance(verdict, dict):  # rankscope.why/1: verdict.text, verdict.ranks (docs/why.md)
        text = verdict.get("text")
        return (text if isinstance(text, str) else ""), _ints(verdict.get("ranks"))
    diagnosis = document.get("diagnosis")  # rankscope stacks
    if isinstance(diagnosis, dict):
        headline = diagnosis.get("headline")
        return (headline if isinstance(headline, str) else ""), _ints(diagnosis.get("divergent_ranks"))
    return "", []


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    if all(type(v) is int for v in value):
        return sorted(set(value))
    ranks = [v.get("rank") for v in value if isinstance(v, dict)]  # [{"rank": 1, ...}]
    return sorted({r for r in ranks if type(r) is int})


def copy_dumps(paths: list[str], directory: Path, limit: int = 1 << 20) -> list[str]:
    """Copy the in-process handler's dumps into ``directory/inproc`` (private); the names copied."""
    target = directory / "inproc"
    copied: list[str] = []
    for path in paths:
        name = os.path.basename(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                data = os.read(fd, limit)
            finally:
                os.close(fd)
            write_private(target, name, data)
        except OSError:
            continue
        copied.append(name)
    return copied

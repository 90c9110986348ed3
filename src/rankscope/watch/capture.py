"""The capture: one command, run as a child with a deadline beside the watching loop
(:class:`RunningCapture`), whose JSON document holds the verdict.

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
from rankscope.watch.attempt import FIRST, Attempt
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


def capture_argv(verb: str, targets: list[str], directory: Path, attempt: Attempt = FIRST) -> list[str]:
    """``targets``: the words that name the job (``--pid N`` for each launcher, or ``--jobid J``);
    ``attempt``: where the current attempt starts (after an elastic restart, `why` reads only what
    it left: :class:`rankscope.watch.attempt.Attempt`)."""
    command = [sys.executable, "-m", "rankscope"]
    if verb == WHY:
        return [*command, WHY, *targets, *attempt.why_words(), "--out", str(directory), "--json"]
    return [*command, STACKS, *targets, "--out", str(directory / "stacks"), "--json"]


@dataclass
class RunningCapture:
    """A capture child that runs while the watcher goes on watching (:meth:`start`); the watcher
    waits on :attr:`pidfd` (or polls :meth:`done`) and collects it with :meth:`finish`.

    Its stdout (the JSON document) and stderr go to unnamed private files, so the child never
    blocks on a pipe nobody reads while the watcher looks elsewhere. The child, and what it starts
    (py-spy), end with its deadline (:meth:`finish` after :attr:`deadline`) and with rankscope.
    """

    verb: str
    argv: list[str]
    directory: Path
    child: lifetime.Child
    stdout: Any
    stderr: Any
    #: A descriptor that becomes readable when the child exits (-1 where pidfd_open is missing).
    pidfd: int = -1

    @classmethod
    def start(
        cls,
        verb: str,
        targets: list[str],
        directory: Path,
        deadline: float,
        attempt: Attempt = FIRST,
    ) -> RunningCapture:
        argv = capture_argv(verb, targets, directory, attempt)
        stdout = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish()
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish()
        try:
            child = lifetime.start(argv, deadline, capture=None, stdout=stdout, stderr=stderr)
        except OSError:
            stdout.close()
            stderr.close()
            raise
        try:
            pidfd = os.pidfd_open(child.pid)
        except (OSError, AttributeError):
            pidfd = -1
        return cls(verb, argv, directory, child, stdout, stderr, pidfd)

    @property
    def deadline(self) -> float:
        assert self.child.deadline is not None
        return self.child.deadline

    def done(self, now: float) -> bool:
        """The child exited, or its deadline passed."""
        return self.child.exited() or now >= self.deadline

    def finish(self) -> CaptureResult:
        """Reap the child (its tree ended first when it is still running: its deadline passed, or
        the watcher is ending) and read what it printed."""
        timed_out = self.child.timed_out
        if self.child.returncode is None:
            if self.child.exited():
                self.child.reap()
            else:
                timed_out = True
                self.child.end()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        try:
            self.stdout.seek(0)
            document = self.stdout.read(lifetime.OUTPUT_LIMIT)
            self.stderr.seek(0, os.SEEK_END)
            self.stderr.seek(max(0, self.stderr.tell() - 4096))
            errors = self.stderr.read().decode("utf-8", "replace")
        finally:
            self.stdout.close()
            self.stderr.close()
        code = self.child.returncode
        result = CaptureResult(self.directory, self.verb, self.argv, code, timed_out, errors=errors)
        try:
            result.document = json.loads(document)
        except ValueError:
            result.document = None
        result.verdict, result.ranks = verdict_of(result.document)
        if not result.verdict:
            last = errors.strip().splitlines()[-1:] or [f"exit code {code}"]
            result.verdict = f"no verdict ({'timed out' if timed_out else last[0]})"
        return result


def verdict_of(document: Any) -> tuple[str, list[int]]:
    """The verdict sentence and culprit ranks of a ``why`` or a ``stacks`` document ("" and [] when none)."""
    if not isinstance(document, dict):
        return "", []
    verdict = document.get("verdict")
    if isinstance(verdict, dict):  # rankscope.why/1: verdict.text, verdict.ranks (docs/why.md)
        text = verdict.get("text")
        return (text if isinstance(text, str) else ""), _ints(verdict.get("ranks"))
    outcome = document.get("outcome")
    if verdict is None and isinstance(outcome, str):  # why named no cause: say what it found
        return f"no cause named (why: {outcome})", []
    diagnosis = document.get("diagnosis")  # rankscope stacks
    if isinstance(diagnosis, dict):
        headline = diagnosis.get("headline")
        return (headline if isinstance(headline, str) else ""), _ints(diagnosis.get("divergent_ranks"))
    return "", []


def cause_of(document: Any) -> str:
    """A ``why`` document's cause ("elsewhere", ...; "" when it names none)."""
    verdict = document.get("verdict") if isinstance(document, dict) else None
    cause = verdict.get("cause") if isinstance(verdict, dict) else None
    return cause if isinstance(cause, str) else ""


def found_nothing(document: Any) -> bool:
    """Whether a ``why`` document says every signal it read shows nothing wrong (outcome "no problem")."""
    return isinstance(document, dict) and document.get("outcome") == "no problem"


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

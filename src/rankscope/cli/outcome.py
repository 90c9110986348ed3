"""The one exit-code policy of the verbs that collect from many targets (docs/exit-codes.md).

A target is a process (local `stacks`) or a node (multi-node `stacks`, `exec`). The library
returns what it got and its failures as data; this decides how the command ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from rankscope.errors import ExitCode
from rankscope.model import Failure, FailureKind, Stage


def exit_code(targets: int, done: int, failures: Sequence[Failure]) -> ExitCode:
    """``targets`` found to try, ``done`` of them collected, ``failures`` listed in the report."""
    if done:
        return ExitCode.PARTIAL if failures else ExitCode.OK
    if not failures:
        return ExitCode.NOTHING_FOUND if targets == 0 else ExitCode.ALL_FAILED
    if all(f.stage == Stage.NO_JOB for f in failures):
        return ExitCode.NOTHING_FOUND  # every node answered "no job here"
    if all(f.kind == FailureKind.PERMISSION for f in failures):
        return ExitCode.PERMISSION_DENIED
    if targets == 0 and all(f.stage == Stage.DISCOVER for f in failures):
        return ExitCode.BAD_INPUT  # only named pids that do not exist (or launchers without workers)
    return ExitCode.ALL_FAILED

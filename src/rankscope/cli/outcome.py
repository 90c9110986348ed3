"""The one exit-code policy of the verbs that collect from many targets (docs/exit-codes.md).

A target is a process (local `stacks`) or a node (multi-node `stacks`, `exec`). The library
returns what it got and its failures as data; this decides how the command ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from rankscope.errors import ExitCode
from rankscope.model import Failure, FailureKind, Stage


def exit_code(targets: int, done: int, failures: Sequence[Failure], missing: Sequence[int] = ()) -> ExitCode:
    """``targets`` found to try, ``done`` of them collected, ``failures`` listed in the report.

    ``missing``: ranks the job's world size says run on the nodes examined but that were not found
    at all (they exited before discovery; rankscope.stacks.analyse.not_found_here). A report
    without them is partial, though nothing failed.
    """
    if done:
        return ExitCode.PARTIAL if failures or missing else ExitCode.OK
    if not failures:
        return ExitCode.NOTHING_FOUND if targets == 0 else ExitCode.ALL_FAILED
    if all(f.stage == Stage.NO_JOB for f in failures):
        return ExitCode.NOTHING_FOUND  # every node answered "no job here"
    if all(f.kind == FailureKind.PERMISSION for f in failures):
        return ExitCode.PERMISSION_DENIED
    if targets == 0 and all(f.stage == Stage.DISCOVER for f in failures):
        return ExitCode.BAD_INPUT  # only named pids that do not exist (or launchers without workers)
    return ExitCode.ALL_FAILED


def stopped_exit_code(signum: int) -> int:
    """A run ended early by a signal (SIGINT: 130, SIGTERM: 143), after printing what it had.

    It wins over the targets' outcome: what was printed is partial because the user stopped it.
    """
    return 128 + signum


def open_exit_code(total: int, good: int) -> int:
    """Probes and links (`net probe`, `net check`): 0 when all of ``total`` are good, 4 when some,
    5 when none (or there were none)."""
    if total and good == total:
        return int(ExitCode.OK)
    return int(ExitCode.PARTIAL if good else ExitCode.ALL_FAILED)

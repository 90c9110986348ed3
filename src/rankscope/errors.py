"""Errors a user can cause, each with a documented exit code (see docs/exit-codes.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: An unexpected internal error (a bug): rerun with --debug and report it.
    INTERNAL = 1
    #: Bad command line (click's own code).
    USAGE = 2
    #: Nothing to look at: no job, no process, no log found.
    NOTHING_FOUND = 3
    #: The report was produced, but some targets failed (listed at the end of the report).
    PARTIAL = 4
    #: Every target failed; nothing could be collected.
    ALL_FAILED = 5
    #: A required external tool (py-spy, ssh, srun ...) is missing.
    MISSING_TOOL = 6
    #: Every target failed because the kernel refused access (ptrace, /proc, files).
    PERMISSION_DENIED = 7
    #: An input file or directory is missing, unreadable or not what it should be.
    BAD_INPUT = 8
    #: `rankscope demo` ran but its diagnosis did not name the injected culprit.
    DEMO_MISSED = 9
    #: `rankscope doctor` ran and at least one check FAILed (each with its fix in the report).
    CHECK_FAILED = 10
    #: `gpu-test`: a rank failed its test (backend error, wrong all_reduce sum, hung collective).
    RANKS_FAILED = 11
    #: `gpu-test`: every rank that reported passed, but some ranks never joined or never reported.
    RANKS_MISSING = 12
    #: `gpu-test`: a set-up mistake caught before the backend started (interface variable, MASTER_ADDR, device mapping).
    MISCONFIGURED = 13
    #: `numerics demo`: a comparison at the default tolerance found values that disagree.
    NUMERICS_MISMATCH = 20
    #: `fr`: the flight recorders show ranks that disagree on their collectives (a desync).
    DESYNC = 14
    #: `why`: a cause was named (the verdict's culprit ranks, cause and location).
    CAUSE_NAMED = 15


class RankscopeError(Exception):
    """An error to show as one line: what went wrong and why, then the fix."""

    def __init__(self, message: str, hint: str = "", exit_code: ExitCode = ExitCode.INTERNAL) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def one_line(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message


class MissingToolError(RankscopeError):
    def __init__(self, tool: str, hint: str) -> None:
        super().__init__(f"{tool} not found on PATH", hint, ExitCode.MISSING_TOOL)
        self.tool = tool


class NothingFoundError(RankscopeError):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message, hint, ExitCode.NOTHING_FOUND)


class BadInputError(RankscopeError):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message, hint, ExitCode.BAD_INPUT)


@dataclass(frozen=True)
class ErrorReport:
    """An error as a JSON document carries it (``{"message", "hint", "exit_code"}``, through rankscope.serial)."""

    message: str
    hint: str
    exit_code: int

    @classmethod
    def of(cls, error: RankscopeError) -> ErrorReport:
        return cls(error.message, error.hint, int(error.exit_code))

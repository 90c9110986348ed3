"""Where a run failed, and where two runs disagree (pure: errors in, a verdict and its words out).

A failure is what ``logs errors`` names as the root cause: the first fatal culprit traceback, and
in it the innermost frame of the user's own code (:func:`rankscope.logs.roles.user_frame`).
Files are compared by name only: the first run's log often comes from another machine or
directory (``/home/user/job/x.py`` there, ``./x.py`` here).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Optional

from rankscope.logs.cuda import is_async_cuda_error
from rankscope.logs.grouping import ErrorsReport
from rankscope.logs.roles import user_frame
from rankscope.logs.tracebacks import FrameLine
from rankscope.model import Words


@dataclass(frozen=True)
class FailurePoint:
    """One run's fatal error and the last frame of the user's own code in its traceback."""

    #: The exception line (``IndexError: index out of range in self``).
    exception: str
    #: The innermost frame that is not torch, an installed package or the standard library.
    user_frame: Optional[FrameLine]
    #: torch said the CUDA error was reported asynchronously: the frame may not be the culprit.
    location_unreliable: bool = False

    def place(self, with_file: bool = False) -> str:
        """``embed (line 4)``; ``embed (model.py line 4)`` with the file."""
        frame = self.user_frame
        if frame is None:
            return "a frame outside your code"
        where = (
            f"{posixpath.basename(frame.filename)} line {frame.line}" if with_file else f"line {frame.line}"
        )
        return f"{frame.function} ({where})"


def failure_point(report: ErrorsReport) -> Optional[FailurePoint]:
    """The root cause of a ``logs errors`` scan as a failure point; None when it names none."""
    root = report.root_cause
    if root is None:
        return None
    tb = root.traceback
    return FailurePoint(tb.exception or tb.exception_type, user_frame(tb.frames), is_async_cuda_error(tb))


class Agreement(Words):
    SAME = "same place"
    DIFFERENT = "different place"
    RERUN_NO_ERROR = "rerun raised no error"
    FIRST_NO_ERROR = "no error in the first run's log"


@dataclass(frozen=True)
class Comparison:
    """The first (asynchronous) run against the rerun."""

    #: The log of the first run, as given.
    log: str
    first_run: Optional[FailurePoint]
    verdict: Agreement
    #: The verdict in one sentence.
    text: str


def _same_place(a: FrameLine, b: FrameLine) -> bool:
    return (
        posixpath.basename(a.filename) == posixpath.basename(b.filename)
        and a.line == b.line
        and a.function == b.function
    )


def compare(
    log: str, first: Optional[FailurePoint], rerun: Optional[FailurePoint], exit_code: int
) -> Comparison:
    """Where the rerun's error is raised compared with where the first run reported it."""
    if first is None:
        return Comparison(
            log,
            None,
            Agreement.FIRST_NO_ERROR,
            f"{log} names no root-cause traceback (see `rankscope logs errors {log}`): nothing to compare",
        )
    if rerun is None:
        return Comparison(
            log,
            first,
            Agreement.RERUN_NO_ERROR,
            f"the rerun left no traceback (exit code {exit_code}); the first run reported "
            f"{first.exception} in {first.place(with_file=True)}: the error may need the GPU, "
            "the same data or the same timing to show",
        )
    if (
        first.user_frame is not None
        and rerun.user_frame is not None
        and _same_place(first.user_frame, rerun.user_frame)
    ):
        checked = " (its location is confirmed)" if first.location_unreliable else ""
        return Comparison(
            log,
            first,
            Agreement.SAME,
            f"the error is raised in {rerun.place()}, where the first run reported it{checked}",
        )
    with_file = (
        first.user_frame is not None
        and rerun.user_frame is not None
        and posixpath.basename(first.user_frame.filename) != posixpath.basename(rerun.user_frame.filename)
    )
    return Comparison(
        log,
        first,
        Agreement.DIFFERENT,
        f"the error is raised in {rerun.place(with_file)}, not in {first.place(with_file)} "
        "where the first run reported it",
    )

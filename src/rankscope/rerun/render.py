"""A rerun's outcome as text for a person (pure)."""

from __future__ import annotations

import shlex

from rankscope.rerun.compare import FailurePoint
from rankscope.rerun.report import RerunDocument


def _frame_lines(point: FailurePoint) -> list[str]:
    frame = point.user_frame
    if frame is None:
        return ["  in your code: no frame of your own code in the traceback (all in torch or packages)"]
    out = [f"  in your code: {frame.filename}:{frame.line} in {frame.function}"]
    if frame.code:
        out.append(f"      {frame.code}")
    return out


def render(document: RerunDocument) -> str:
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in document.environment.items())
    ended = (
        f"timed out, ended (exit code {document.exit_code})"
        if document.timed_out
        else f"exit code {document.exit_code}"
    )
    out = [f"rankscope rerun ({shown}): {ended}"]
    error = document.error
    if error is None:
        out.append("  no traceback in the output")
    else:
        out.append(f"  error: {error.exception}")
        out.extend(_frame_lines(error))
        if error.location_unreliable:
            out.append(
                "  location still unreliable: CUDA reported this error asynchronously in the rerun too"
            )
    if document.comparison is not None:
        out.append(f"  against {document.comparison.log}: {document.comparison.text}")
    return "\n".join(out)

"""The rerun's environment, its captured output, and the failures read from output and logs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, Optional

from rankscope.logs.collect import scan_errors
from rankscope.logs.reading import Reading
from rankscope.logs.sources import discover
from rankscope.passthrough import run_passing_through
from rankscope.rerun.compare import FailurePoint, compare, failure_point
from rankscope.rerun.report import RerunDocument

#: What each mode sets in the command's environment.
SYNC = {"CUDA_LAUNCH_BLOCKING": "1"}
CPU = {"CUDA_VISIBLE_DEVICES": ""}
#: The exit code when the timeout ended the command (as GNU timeout).
TIMED_OUT = 124
#: Output kept for finding the traceback: its end is where a fatal one is.
CAPTURE_LIMIT = 16 << 20


def settings(sync: bool, cpu: bool) -> dict[str, str]:
    """The variables a rerun sets, by mode."""
    return {**(SYNC if sync else {}), **(CPU if cpu else {})}


def no_cuda_device(env: Mapping[str, str], nvidia_devices: bool) -> str:
    """Why no CUDA device is visible to the command (``""`` when one may be): the variable hides them
    all, or ``nvidia_devices`` says this machine has no NVIDIA device files."""
    hidden = env.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
    if not nvidia_devices:
        return "this machine has no NVIDIA GPU (no /dev/nvidia0, /dev/nvidia1, ...)"
    return ""


def rerun_environment(base: Mapping[str, str], sync: bool, cpu: bool) -> dict[str, str]:
    return {**base, **settings(sync, cpu)}


class Capture:
    """The last :data:`CAPTURE_LIMIT` bytes of the command's output (stdout and stderr as they came).

    Call it with each chunk; :meth:`data` starts at a line start once something was dropped.
    """

    def __init__(self, limit: int = CAPTURE_LIMIT) -> None:
        self.limit = limit
        self._data = bytearray()
        self.dropped = 0

    def __call__(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * self.limit:
            cut = len(self._data) - self.limit
            newline = self._data.find(b"\n", cut)
            cut = newline + 1 if newline >= 0 else cut
            self.dropped += cut
            del self._data[:cut]

    def data(self) -> bytes:
        return bytes(self._data)


def failure_in_log(path: str) -> Optional[FailurePoint]:
    """The root cause ``logs errors`` finds in a log file (raises BadInputError for a missing one)."""
    reading = Reading(discover([path]))
    report, _ = scan_errors(reading)
    return failure_point(report)


def failure_in_output(output: bytes) -> Optional[FailurePoint]:
    """The same for captured output: read by the same readers from a private temporary file."""
    if b"Traceback (most recent call last)" not in output:
        return None
    fd, path = tempfile.mkstemp(prefix="rankscope-rerun-", suffix=".log")  # 0600: output may hold secrets
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(output)
        return failure_in_log(path)
    finally:
        os.unlink(path)


def run_again(
    command: Sequence[str],
    base: Mapping[str, str],
    sync: bool,
    cpu: bool,
    timeout: Optional[float] = None,
    stdout: Optional[IO[bytes]] = None,
    compare_log: Optional[str] = None,
    first: Optional[FailurePoint] = None,
    warnings: Sequence[str] = (),
) -> RerunDocument:
    """Run ``command`` again with the mode's variables over ``base``, its output passed through as it
    comes (stdout to ``stdout``, default rankscope's), ended after ``timeout`` seconds (exit code
    :data:`TIMED_OUT`); its error read from the output, compared with ``first`` (the failure read
    from ``compare_log``) when a log was given."""
    capture = Capture()
    ran = run_passing_through(
        list(command),
        env=rerun_environment(base, sync, cpu),
        tap=capture,
        timeout=timeout,
        stdout=stdout,
    )
    code = TIMED_OUT if ran.timed_out else ran.code
    error = failure_in_output(capture.data())
    return RerunDocument(
        command=list(command),
        environment=settings(sync, cpu),
        exit_code=code,
        timed_out=ran.timed_out,
        error=error,
        comparison=compare(compare_log, first, error, code) if compare_log is not None else None,
        warnings=list(warnings),
    )

"""torchrun's failure summary (``ChildFailedError`` and its ``Root Cause`` entry) as
torch.distributed.elastic prints it, for tests that read logs: one entry, its fields given."""

from __future__ import annotations

#: The ``traceback :`` field of an entry without an ``@record`` error file.
NO_TRACEBACK = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
_RULE = "=" * 60
_THIN = "-" * 60


def failure_summary(
    rank: int,
    local: int,
    host: str,
    pid: int,
    time: str,
    error_file: str = "<N/A>",
    traceback: str = NO_TRACEBACK,
    exitcode: int = 1,
    other: tuple[int, int, int] | None = None,
) -> str:
    """The summary of one failed rank; ``traceback`` is the field's text with its own lines (ending
    in a newline); ``other``: (rank, local rank, pid) of one more failure, listed under ``Failures:``."""
    failures = "  <NO_OTHER_FAILURES>\n"
    if other is not None:
        failures = _entry(1, other[0], other[1], host, other[2], time, error_file, traceback, exitcode)
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        f"{_RULE}\ntrain.py FAILED\n{_THIN}\nFailures:\n{failures}{_THIN}\n"
        "Root Cause (first observed failure):\n"
        + _entry(0, rank, local, host, pid, time, error_file, traceback, exitcode)
        + f"{_RULE}\n"
    )


def _entry(
    index: int,
    rank: int,
    local: int,
    host: str,
    pid: int,
    time: str,
    error_file: str,
    traceback: str,
    exitcode: int,
) -> str:
    return (
        f"[{index}]:\n"
        f"  time      : {time}\n"
        f"  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {local})\n"
        f"  exitcode  : {exitcode} (pid: {pid})\n"
        f"  error_file: {error_file}\n"
        f"  traceback : {traceback}"
    )

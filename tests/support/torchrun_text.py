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
) -> str:
    """The summary of one failed rank; ``traceback`` is the field's text with its own lines (ending
    in a newline)."""
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        f"{_RULE}\ntrain.py FAILED\n{_THIN}\nFailures:\n  <NO_OTHER_FAILURES>\n{_THIN}\n"
        "Root Cause (first observed failure):\n[0]:\n"
        f"  time      : {time}\n"
        f"  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {local})\n"
        f"  exitcode  : {exitcode} (pid: {pid})\n"
        f"  error_file: {error_file}\n"
        f"  traceback : {traceback}{_RULE}\n"
    )

"""After a report: the caller's runtime directory pruned once a day (docs/inproc.md, "Pruning").

Importing the pruning (rankscope.inproc.prune and its rule) costs about 8 ms of CPU, a few percent of
a `stacks` run, whose wall time to its exit is benchmarked against the manual py-spy pipeline. So a
``stat`` of the directory's stamp says first whether pruning may be due, and the pruning is imported
only then: on the other days a command pays one or two system calls.
"""

from __future__ import annotations

import os
import time

from rankscope.inproc import runtime


def after_report() -> None:
    """Prune the caller's own runtime directory when a day has passed. Never raises: the command's
    report and exit code are what count."""
    try:
        if not runtime.prune_may_be_due(runtime.runtime_dir(os.environ, os.getuid()), time.time()):
            return
        from rankscope.inproc.prune import after_listing

        after_listing()
    except Exception:  # noqa: BLE001 - a bug here must not turn a printed report into a failure
        return

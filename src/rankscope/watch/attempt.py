"""Where the current attempt of an elastically restarted job starts, for the captures that follow.

When every worker of a generation has exited and the launcher starts new ones (torchrun
``--max-restarts``), what the earlier attempt left is not the current workers' evidence: its output
(read from the sizes the files had when the first new worker was found: ``why --log-from``), its
ranks' ``.term``/``.crash`` dumps, a ``--log-dir``'s ``attempt_0/`` files and error files, its
cores (all older than the moment its last worker exited: ``why --since``).

The first attempt of a job the watcher started reads its output from the sizes the files had when
its first worker was found (``--log-from`` without ``--since``): `why` is told that no restart came,
so it never takes torchrun's report of a failed rank, printed while torchrun tears the job down and
still runs, for one. An attached watcher's first attempt is :data:`FIRST` (everything is read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Attempt:
    """The start of the current attempt; the first attempt's is empty (everything is read)."""

    #: Output file -> its size when the first worker of this attempt was found.
    output_from: dict[str, int] = field(default_factory=dict)
    #: When the earlier attempt's last worker exited (time.time()); None for the first attempt.
    since: Optional[float] = None

    def why_words(self) -> list[str]:
        """The `why` flags that read only this attempt's evidence."""
        words = [word for path, at in self.output_from.items() for word in ("--log-from", f"{path}:{at}")]
        if self.since is not None:
            words += ["--since", f"{self.since:.3f}"]
        return words


FIRST = Attempt()

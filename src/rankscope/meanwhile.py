"""Import modules in a thread while this process waits for its children.

Why: `rankscope stacks` spends most of its wall time waiting for py-spy, one run per rank, and
about a third of its own CPU importing what the report needs (the stacks room's analysis, about
50 dataclasses). Imported after the dumps, that time adds to the run; imported before them, it
delays the first dump. Imported while the first dumps run, on a machine with a core to spare, it
is spent beside them (measured in docs/benchmarks.md, "Start-up: the dumps start first").

Only the standard library's built-in ``_thread`` is used (``threading`` costs an import of its
own). A module that fails to import here is left alone: the caller imports it again in its own
thread after :meth:`Meanwhile.join`, and the error is raised there, where it always was.

One call may go with the imports (``then``: a listing the caller needs after the waiting, not
before it); :meth:`Meanwhile.join` returns its result, or None where it raised (the caller then
calls it itself, and sees the error there).
"""

from __future__ import annotations

import _thread
import sys

TYPE_CHECKING = False  # typing is not imported for this
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, Optional

#: The interpreter's thread switch interval while modules are imported beside a waiting caller: the
#: caller's poll loop gets the interpreter back within a millisecond of a child's output (default 5 ms).
SWITCH_INTERVAL = 0.001


class Meanwhile:
    """Import ``names`` (those not imported yet), then call ``then``, in a thread started now;
    :meth:`join` waits for it and returns what ``then`` returned."""

    def __init__(self, names: Iterable[str], then: Optional[Callable[[], Any]] = None) -> None:
        self._names = tuple(name for name in names if name not in sys.modules)
        self._then = then
        self._result: Any = None
        self._done = _thread.allocate_lock()
        self._interval = sys.getswitchinterval()
        if not self._names and then is None:
            return
        self._done.acquire()
        sys.setswitchinterval(min(self._interval, SWITCH_INTERVAL))
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError:  # no thread to be had: the caller imports them itself
            self._finish()

    def _run(self) -> None:
        try:
            for name in self._names:
                try:
                    __import__(name)
                except Exception:  # noqa: BLE001, S112 - raised again by the caller's own import
                    continue
            if self._then is not None:
                try:
                    self._result = self._then()
                except Exception:  # noqa: BLE001 - the caller calls it again and sees the error
                    self._result = None
        finally:
            self._finish()

    def _finish(self) -> None:
        sys.setswitchinterval(self._interval)
        self._done.release()

    def join(self) -> Any:
        """Wait until every module was imported (or failed to) and ``then`` returned; its result (None
        without one, or where it raised)."""
        with self._done:
            pass
        return self._result

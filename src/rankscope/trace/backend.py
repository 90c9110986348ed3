"""Which hot path records a session's events: the C extension's hooks or the pure-Python ones.

The one place that reads the tracer's environment, once per session (:func:`choose`):

- ``RANKSCOPE_TRACE_PURE=1``: the pure-Python hooks even where the C extension is built;
- ``RANKSCOPE_TRACE_HOOK=settrace``: on Python < 3.12 with the C extension, its settrace function
  instead of its profile function (calls and returns; C calls rejected in C). The profile function is
  the default unless lines are wanted. Measured in one process, alternating (3.11, x untraced): fib
  6.1x profile, 10.5x settrace, 6.2x a no-op Python settrace function; torch MLP loop 1.14x, 1.21x,
  1.19x;
- ``RANKSCOPE_TRACE_CLOCK=monotonic``: the C hot path stamps with CLOCK_MONOTONIC, not the CPU's
  tick counter.

Python 3.9, standard library only; nothing here raises into the traced program.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Optional

    from rankscope.trace.tracer import Tracer

#: Python >= 3.12: ``sys.monitoring`` callbacks; before, settrace or the C profile function.
MONITORING = sys.version_info >= (3, 12)


class HotPath:
    """The choice for one session: the C extension (None: pure Python) and how it hooks in."""

    __slots__ = ("c", "lines", "profile", "ticks")

    def __init__(self, c: Any, lines: bool, profile: bool, ticks: bool) -> None:
        self.c = c
        self.lines = lines
        #: The C profile function, per thread (Python < 3.12, the C extension, no line events).
        self.profile = profile
        #: The C hot path stamps with the CPU's tick counter where it can.
        self.ticks = ticks

    def hook_name(self) -> str:
        """What the file's metadata says hooks the calls: ``setprofile (C)``, ``settrace``, ..."""
        if MONITORING:
            return "monitoring" + (" (C)" if self.c else "")
        if self.profile:
            return "setprofile (C)"
        return "settrace" + (" (C)" if self.c else "")

    def make_hooks(self, tracer: Tracer) -> dict[str, Any]:
        """The event callbacks over ``tracer``'s file: the C extension's where it is used, else the
        pure-Python family of this Python's hook."""
        if self.c is not None:
            from rankscope.trace.hooks_c import make_c_hooks

            disable = sys.monitoring.DISABLE if MONITORING else None  # type: ignore[attr-defined]
            return make_c_hooks(tracer, self.c, self.ticks, disable)
        from rankscope.trace import hooks_py

        return hooks_py.monitoring_hooks(tracer) if MONITORING else hooks_py.settrace_hooks(tracer)


def choose(lines: bool, environ: Optional[Mapping[str, str]] = None) -> HotPath:
    """The hot path for a session with (or without) line events, from the environment."""
    env = os.environ if environ is None else environ
    c = None if env.get("RANKSCOPE_TRACE_PURE") == "1" else _load_c()
    profile = c is not None and not MONITORING and not lines and env.get("RANKSCOPE_TRACE_HOOK") != "settrace"
    return HotPath(c, lines, profile, env.get("RANKSCOPE_TRACE_CLOCK") != "monotonic")


def _load_c() -> Any:
    """The C extension (``_ctrace``), or None where it is not built for this Python."""
    try:
        from rankscope.trace import _ctrace  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _ctrace

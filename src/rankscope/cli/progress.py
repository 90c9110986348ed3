"""The one progress line every command shows: on stderr when it is a terminal, silent when piped.

Library code never prints; it takes an optional ``progress`` callable (``Callable[[str], None]``)
and the CLI passes :func:`tty_progress`'s line, or None when nobody is watching.
"""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class ProgressLine:
    """One self-overwriting line on a terminal, redrawn at most every ``min_interval`` seconds."""

    def __init__(self, stream: TextIO, min_interval: float = 0.0) -> None:
        self.stream = stream
        self.min_interval = min_interval
        self._last = 0.0
        self._shown = False

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if self.min_interval and now - self._last < self.min_interval:
            return
        self._last = now
        self.stream.write(f"\r\033[K{message}")
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the line (before the report is printed)."""
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False


def tty_progress(min_interval: float = 0.0, stream: Optional[TextIO] = None) -> Optional[ProgressLine]:
    """A progress line on stderr when it is a terminal; None when piped (tests, scripts, CI)."""
    stream = stream if stream is not None else sys.stderr
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return ProgressLine(stream, min_interval)

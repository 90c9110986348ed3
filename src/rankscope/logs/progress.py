"""Reading progress on stderr, only when stderr is a terminal (quiet when piped or in tests)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Optional, Protocol, TextIO, TypeVar

T = TypeVar("T")


class HasBytesRead(Protocol):
    bytes_read: int


class Progress:
    """``reading job.log  412 / 1074 MB`` on one self-overwriting line, at most 4 times a second."""

    def __init__(
        self, total_bytes: Optional[int], stream: Optional[TextIO] = None, enabled: bool = True
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.total = total_bytes
        self._last = 0.0
        self._shown = False

    def track(self, items: Iterator[T], name: str, done_bytes: HasBytesRead) -> Iterator[T]:
        for item in items:
            yield item
            if self.enabled:
                now = time.monotonic()
                if now - self._last >= 0.25:
                    self._last = now
                    self._show(name, done_bytes.bytes_read)

    def _show(self, name: str, done: int) -> None:
        total = f" / {self.total / 1e6:.0f}" if self.total else ""
        self.stream.write(f"\rreading {name[-40:]}  {done / 1e6:.0f}{total} MB\x1b[K")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

"""The part every stdout/stderr wrapper of rankscope.inproc shares (Python 3.9, stdlib only)."""

from __future__ import annotations

from typing import IO, Any


class StreamProxy:
    """Wraps a text stream; anything the wrapper does not define goes to the original."""

    def __init__(self, original: IO[str]) -> None:
        self._original = original

    def isatty(self) -> bool:
        # Lines are rewritten, so programs must not treat this as a terminal (no colour codes, no \r bars).
        return False

    def fileno(self) -> int:
        return self._original.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

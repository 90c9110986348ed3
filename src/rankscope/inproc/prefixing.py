"""``prefix_output``: put ``[host:rank] `` in front of every line this Python process writes.

Covers ``print``, ``logging`` handlers that write to stdout/stderr, warnings and uncaught
tracebacks (all go through ``sys.stdout``/``sys.stderr``). Output written by C/C++ code
straight to file descriptors 1 and 2 (NCCL, c10 logs) is not seen: wrap the whole process
with ``rankscope prefix -- CMD`` for that.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import IO, Any, Optional

from rankscope.inproc._stream import StreamProxy
from rankscope.ranks import current_rank

#: A line longer than this is written in pieces of this size, each with the prefix and a newline
#: (the cut of ``rankscope prefix`` and of the logs readers): a line without end cannot grow memory.
PIECE = 4 << 20


def prefix_label(short_host: bool = False) -> str:
    """``[host:rank] `` for this process (``[host] `` when no launcher set a rank)."""
    from rankscope.model import rank_label  # already loaded by current_rank()

    rank = current_rank()
    host = rank.host
    if short_host:
        host = re.sub(r"[^0-9]", "", host) or host
    return f"[{rank_label(host, rank.rank)}] "


class _PrefixStream(StreamProxy):
    """Buffers partial lines; writes whole lines with the prefix, flushed."""

    def __init__(self, original: IO[str], prefix: str) -> None:
        super().__init__(original)
        self._prefix = prefix
        self._partial = ""
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        with self._lock:
            data = self._partial + text
            lines = data.split("\n")
            self._partial = lines.pop()
            while len(self._partial) >= PIECE:
                lines.append(self._partial[:PIECE])
                self._partial = self._partial[PIECE:]
            if lines:
                self._original.write("".join(f"{self._prefix}{line}\n" for line in lines))
                self._original.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._partial:
                self._original.write(self._prefix + self._partial)
                self._partial = ""
            self._original.flush()


def prefix_output(short_host: bool = False, label: Optional[str] = None) -> str:
    """Prefix every line of ``sys.stdout`` and ``sys.stderr``; returns the prefix used.

    Calling it twice does nothing the second time. Logging handlers already attached to the
    old streams are pointed at the new ones.
    """
    if isinstance(sys.stdout, _PrefixStream):
        return sys.stdout._prefix
    prefix = f"[{label}] " if label else prefix_label(short_host)
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = _PrefixStream(old_out, prefix)
    sys.stderr = _PrefixStream(old_err, prefix)
    loggers: list[Any] = [logging.getLogger()]
    loggers.extend(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger))
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler):
                if handler.stream is old_out:
                    handler.setStream(sys.stdout)
                elif handler.stream is old_err:
                    handler.setStream(sys.stderr)
    return prefix

"""Progress bars that redraw their line: each redraw, and what follows the last one, a line of its own.

tqdm (and every bar built like it) rewinds its line with a carriage return before each draw of the
bar, and writes no newline after it. In a log file the redraws and whatever the next writer prints
(another rank's ``[rank3]: Traceback (most recent call last):``, bash's ``line 9: 918442 Killed``)
share one physical line, the text right after the last bar's bracket: ``\\r  1%|▏  | 23/1752
[01:05<1:23:14,  2.89s/it]\\r  1%|▏  | 24/1752 [01:08<1:22:56,  2.88s/it][rank3]: Traceback ...``
(measured with a process drawing such a bar beside one that raises: tests/logs/test_redraws.py).
A line reader sees one line that starts with a bar and never reads the traceback's header; a paste
that lost the carriage returns is the same.

So a carriage return that is not part of a CRLF ends a line, and a bar's rate bracket
(``2.88s/it]``, ``13.81it/s]``, ``?it/s]``, ``1.20MB/s]``, with a postfix: ``1.24it/s, loss=0.690]``) followed at once by more text ends one
too, in a window that holds a redraw or a bar with a known total (``%|``). The lines after them
are numbered one more each: a log's line numbers then count the redraws. Cost: a search for
``\\r`` and one for ``|`` per window; a window without either is passed on as it is.
"""

from __future__ import annotations

import re

from rankscope.logs.sources import Window

#: A carriage return that does not end a CRLF line.
_LONE_CR = re.compile(rb"\r(?!\n)")
#: A bar's rate bracket with text right after it (the next writer's, on the bar's line).
#: tqdm's postfix (``set_postfix``, Lightning's ``loss=0.690, v_num=12``) stands inside the bracket after the rate.
_GLUED = re.compile(rb"(?:\d+(?:\.\d+)?|\?)(?:it|s|[kMGT]?B)?/(?:s|it)(?:, [^\]\r\n]{0,300})?\](?=[^\s|])")


def _needs_split(data: bytes, lo: int, hi: int) -> bool:
    """Whether ``data[lo:hi]`` holds a redraw or a bar (``%|``: a bar whose total is known). The
    first searches are for one byte (``\\r``, ``|``: memchr's speed), before the counts and the pair:
    a search for the rate's ``/s]`` visited every ``]`` of every rank's prefix (14% of ``logs
    errors``' CPU on 512 ranks), a count of ``\\r`` cost eight times a search."""
    if data.find(b"\r", lo, hi) >= 0:  # then the counts (slower than a find, for one byte)
        crs = data.count(b"\r", lo, hi)
        if crs != data.count(b"\r\n", lo, hi):
            return True
    return data.find(b"|", lo, hi) >= 0 and data.find(b"%|", lo, hi) >= 0


def _split(data: bytes) -> bytes:
    return _GLUED.sub(lambda m: m.group(0) + b"\n", _LONE_CR.sub(b"\n", data))


def split_redraws(data: bytes) -> bytes:
    """``data`` (whole lines) with every redraw and glued bar ending its line."""
    return _split(data) if _needs_split(data, 0, len(data)) else data


def split_window(window: Window) -> Window:
    """The window, or a new one when it holds a redraw or a bar that text follows."""
    data, lo, hi = window
    if not _needs_split(data, lo, hi):
        return window
    split = _split(data[lo:hi])  # checked just above: not again
    return (split, 0, len(split))

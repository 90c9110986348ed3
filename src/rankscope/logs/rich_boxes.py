"""Tracebacks drawn in a box by the ``rich`` library, read back as Python prints them.

Where ``rich`` is installed, accelerate, transformers' scripts and many CLIs install its traceback
handler, which draws an uncaught exception as a box and prints the exception line after it::

    ╭──────────── Traceback (most recent call last) ────────────╮
    │ /home/u/train.py:212 in <module>                           │
    │                                                            │
    │   209 │   args = parse()                                   │
    │ ❱ 212 │   main(args)                                       │
    │ /opt/conda/lib/python3.10/site-packages/accelerate/accele  │
    │ rator.py:1300 in prepare_model                             │
    │ /opt/conda/lib/python3.10/site-packages/accelerate/utils/o │
    │ ther.py:81                                                 │
    │ in wait_for_everyone                                       │
    ╰────────────────────────────────────────────────────────────╯
    ValueError: Must flatten tensors with uniform dtype ...

(with colours; a long path wraps inside the box, and its ``in FUNC`` or ``FUNC`` alone may go to a
line of its own: ``…/job.py:7 in`` then ``<module>``). A reader of plain tracebacks sees no header at a
line's start and no ``File "..."`` line: the rank's error is lost. Each such box becomes the lines
Python would have printed (``Traceback (most recent call last):``, then ``  File "PATH", line N, in
FUNC`` and the line marked ``❱`` as its code), one line for each of the box's lines so that line
numbers stay the file's; a prefix before the box's corner (a rank's) is kept on every line. Cost: a
search for one byte (``\\xe2``, the lead byte of the box's characters) per window; an ASCII log is
passed on as it is.
"""

from __future__ import annotations

import re
from typing import Optional

_ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
_TOP = re.compile(rb"^(?P<prefix>.*?)\xe2\x95\xad\xe2\x94\x80.*Traceback \(most recent call last\)")
_SIDE = b"\xe2\x94\x82"  # │
_BOTTOM = b"\xe2\x95\xb0"  # ╰
_MARK = b"\xe2\x9d\xb1"  # ❱, the frame's own line
_FRAME = re.compile(rb"^(?P<path>\S.*?):(?P<line>\d+) in (?P<func>\S.*?)\s*$")
#: A path cut before its function: ``…/accelerator.py:1761``, ``…/job.py:7 in`` (the function on the next line).
_NUMBERED = re.compile(rb":\d+(?: in)?$")
_CUT_HEAD = re.compile(rb"^\S+:\d+ in$")
_CODE = re.compile(rb"^(?:" + _MARK + rb")?\s*\d+ (?:(?:" + _SIDE + rb"| )\s*)*(?P<code>.*?)\s*$")
#: Lines a box holds at most (a bound for a box that never closes).
MAX_BOX_LINES = 2000


class RichBoxes:
    """Feed windows of whole lines; get them back with every rich traceback box read as plain text."""

    def __init__(self) -> None:
        self._prefix: Optional[bytes] = None  # inside a box: the prefix its lines carry
        self._lines = 0
        self._pending: bytes = b""  # a path cut at the box's width, waiting for its ``:N in f`` line

    @property
    def idle(self) -> bool:
        """Outside a box: a window without the box's lead byte is passed on as it is."""
        return self._prefix is None

    def feed(self, data: bytes) -> bytes:
        if self._prefix is None and data.find(b"\xe2") < 0:
            return data
        if self._prefix is None and data.find(b"Traceback (most recent call last)") < 0:
            return data
        lines = data.split(b"\n")
        out = [self._line(line) for line in lines]
        return b"\n".join(out)

    def _line(self, line: bytes) -> bytes:
        plain = _ANSI.sub(b"", line).rstrip(b"\r")
        if self._prefix is None:
            top = _TOP.match(plain)
            if top is None:
                return line
            self._prefix, self._lines, self._pending = top.group("prefix"), 0, b""
            return self._prefix + b"Traceback (most recent call last):"
        prefix = self._prefix
        self._lines += 1
        body = plain[len(prefix) :] if plain.startswith(prefix) else plain
        stripped = body.strip()
        if stripped.startswith(_BOTTOM) or self._lines > MAX_BOX_LINES:
            self._prefix = None
            return prefix
        if not stripped.startswith(_SIDE):
            self._prefix = None  # not a box line after all: the box ended without its bottom
            return line
        inner = stripped[len(_SIDE) :]
        if inner.endswith(_SIDE):
            inner = inner[: -len(_SIDE)]
        inner = inner.strip()
        frame = _FRAME.match(self._pending + inner) if inner else None
        if frame is None and inner and self._pending:
            # the box cut at the space before "in": "…/accelerator.py:1761" then "in init_trackers"
            frame = _FRAME.match(self._pending + b" " + inner)
        if frame is not None:
            self._pending = b""
            path, number, func = frame.group("path"), frame.group("line"), frame.group("func")
            return prefix + b'  File "' + path + b'", line ' + number + b", in " + func
        if inner.startswith(_MARK):
            code = _CODE.match(inner)
            return prefix + b"    " + (code.group("code") if code is not None else b"")
        if inner and (_CUT_HEAD.match(inner) or (b" " not in inner and b"/" in inner + self._pending)):
            if _NUMBERED.search(self._pending) and inner.startswith(b"/"):
                self._pending = b""  # a path with its number whose function never came: a new one starts
            self._pending += inner  # a path the box's width cut: its rest and ``:N in f`` follow
        return prefix

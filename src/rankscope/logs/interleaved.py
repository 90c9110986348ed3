"""Undo write-interleaving: physical lines that hold the text of several ranks.

Ranks that share one output file without a lock (no ``printflock``, ``PYTHONUNBUFFERED=1``,
an ``O_APPEND`` console) interleave at *write* granularity, not line granularity: ``print``
writes its text and its newline apart, so two ranks printing at once give::

    [rank3]: step 1 done[rank4]: step 1 done
    <empty line: rank 4's newline>

The rule (deliberately narrow, so ordinary text is never cut):

- only a line that *starts* with a bracket rank prefix is looked at (``[rank3]:``,
  ``[node7:3]:``, ``[default3]:``, ``[3]:``, rankscope's ``[node7:3] ``);
- it is cut before each later marker of the *same family* as its own prefix: the same shape
  (the prefix's name with its digits read as any number: ``[node017:137]:`` is the family
  ``[node<n>:<n>]:``; ``[rank3]:`` is ``[rank<n>]:``) and the same separator right after the
  ``]``. A marker of another family (``[trainer.py:45] `` in a logging format) is text, and
  so is torch's ``[rankN]:`` right after the line's own prefix (``[rank3]:[rank3]: Traceback``
  under a ``[rank${rank}]:`` torchrun template: the nesting that the prefix parser strips);
- each cut makes one more line owed a newline: the next empty physical lines, up to the number
  owed, are those newlines (written late, by the other ranks) and are dropped.

Open MPI ``--tag-output`` fragments have their own joiner (:mod:`rankscope.logs.ompi`); lines
that a launcher prefixes per line (torchrun ``--tee``, ``srun --label``) are never interleaved.
Cost: one ``bytes.count`` pair per 1 MiB window when no line holds a ``[`` after its start (one
count when the reader has counted its rank-prefixed lines: :func:`prefixes.tally_lines`);
otherwise one ``bytes.replace`` of the window and a few lookups per ``[`` inside a line.
"""

from __future__ import annotations

import re
from typing import Optional

from rankscope.logs.sources import ReadStats, Window

#: A bracket rank marker with a separator: ``[name<digits>]`` then ``:`` or a space.
_MARKER = re.compile(rb"\[([^\[\]\s]{0,200}?)\d+\]([: ])")
_DIGITS = re.compile(rb"\d+")
#: NCCL's ``host:pid:tid `` right before a marker: that ``[0]`` is NCCL's device field, not a rank's
#: marker (``[0] node0:12:12 [0] NCCL INFO ...`` under MPICH's -prepend-rank); the host may be empty.
_NCCL_HEAD = re.compile(rb"(?:^|\s)[^\s:\[\]]*:\d+:\d+ $")
#: Most newlines a log may owe at once (a bound, not a limit anyone meets: ranks x 2).
_MAX_OWED = 1 << 20
_CACHE = 4096


class InterleaveRepair:
    """Feed windows of whole physical lines; get windows of whole per-rank lines."""

    def __init__(self, stats: ReadStats) -> None:
        self.stats = stats
        #: Newlines still owed by lines split before (see the module doc).
        self.owed = 0
        self._families: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}

    def _family(self, name: bytes, sep: bytes) -> tuple[bytes, bytes]:
        key = (name, sep)
        family = self._families.get(key)
        if family is None:
            if len(self._families) >= _CACHE:
                self._families.clear()
            family = self._families[key] = (_DIGITS.sub(b"#", name), sep)
        return family

    def feed(self, window: Window, bracketed: Optional[int] = None) -> Window:
        """The window, or a new one with its interleaved lines split (``bracketed``: how many of its
        lines the caller already knows to start with ``[``, never more than do)."""
        data, lo, hi = window
        brackets = data.count(b"[", lo, hi)
        if bracketed != brackets:  # some "[" may be inside a line
            starts = data.count(b"\n[", lo, hi) + (1 if data.startswith(b"[", lo) else 0)
            cuts = self._cuts(data, lo, hi) if brackets > starts else []
        else:  # every "[" starts one of those lines: nothing is embedded
            cuts = []
        if not cuts and (self.owed == 0 or not _has_empty_line(data, lo, hi)):
            return window
        return self._rebuild(data, lo, hi, cuts)

    def _cuts(self, data: bytes, lo: int, hi: int) -> list[int]:
        """Where embedded markers of the line's own family start."""
        cuts: list[int] = []
        line_start = -1
        own: Optional[tuple[bytes, bytes]] = None
        own_end = 0
        # Only the brackets inside lines are visited: those that start lines are masked (with a
        # NUL, which the reader has already dropped from the text) so bytes.find skips them.
        masked = data[lo:hi].replace(b"\n[", b"\n\0")
        found = masked.find(b"[", 1)
        while found >= 0:
            pos = lo + found
            found = masked.find(b"[", found + 1)
            match = _MARKER.match(data, pos, hi)
            if match is None:
                continue
            newline = data.rfind(b"\n", lo, pos)
            start = lo if newline < 0 else newline + 1
            if start != line_start:
                line_start = start
                head = _MARKER.match(data, start, hi)
                own = None if head is None else self._family(head.group(1), head.group(2))
                own_end = 0 if head is None else head.end()
            if own is None or pos < own_end or (pos == own_end and data.startswith(b"[rank", pos)):
                continue  # a line without a rank prefix, or torch's nested marker right after it
            if self._family(match.group(1), match.group(2)) == own and not _NCCL_HEAD.search(
                data, max(start, pos - 64), pos
            ):
                cuts.append(pos)
        return cuts

    def _rebuild(self, data: bytes, lo: int, hi: int, cuts: list[int]) -> Window:
        """The window with a newline before each cut and owed empty lines dropped."""
        events = [(pos, 1) for pos in cuts] + [(pos, 0) for pos in _empty_lines(data, lo, hi)]
        events.sort()
        out: list[bytes] = []
        last = lo
        owed = self.owed
        split_lines: set[int] = set()
        dropped = 0
        for pos, kind in events:
            if kind == 1:
                out.append(data[last:pos])
                out.append(b"\n")
                last = pos
                split_lines.add(data.rfind(b"\n", lo, pos))
                owed = min(owed + 1, _MAX_OWED)
            elif owed > 0:  # an empty line at pos (its "\n" is data[pos]): the owed newline
                out.append(data[last:pos])
                last = pos + 1
                owed -= 1
                dropped += 1
        out.append(data[last:hi])
        self.owed = owed
        self.stats.interleaved_lines += len(split_lines)
        self.stats.interleaved_newlines += dropped
        rebuilt = b"".join(out)
        return (rebuilt, 0, len(rebuilt))


def _has_empty_line(data: bytes, lo: int, hi: int) -> bool:
    return data.startswith(b"\n", lo) or data.find(b"\n\n", lo, hi) >= 0


def _empty_lines(data: bytes, lo: int, hi: int) -> list[int]:
    """Start offsets of the empty lines (each is just its ``\\n``) in ``data[lo:hi]``."""
    found = [lo] if data.startswith(b"\n", lo) else []
    pos = data.find(b"\n\n", lo, hi)
    while pos >= 0:
        found.append(pos + 1)
        pos = data.find(b"\n\n", pos + 1, hi)
    return found


def split_pieces(line: bytes) -> list[bytes]:
    """One physical line (without its newline) cut by the rule above: ``[line]`` when it holds
    one rank's text. For readers that look at a few lines only (``logs grep``)."""
    cuts = InterleaveRepair(ReadStats())._cuts(line, 0, len(line))
    if not cuts:
        return [line]
    bounds = [0, *cuts, len(line)]
    return [line[start:end] for start, end in zip(bounds, bounds[1:])]

"""Rebuild each rank's Python tracebacks from interleaved lines, then group identical ones.

Fast path: a chunk is scanned with ``bytes.find`` for ``Traceback (most recent call last)``;
from each header only that rank's following lines are visited (found by searching for the
rank's raw prefix), so the lines of the other 511 ranks cost nothing in Python. A traceback
cut by a chunk boundary simply continues in the next chunk.

After its exception line a traceback stays open while the collector counts the lines its rank
goes on writing (one ``bytes.count`` of the rank's prefix per block): a rank that writes
:data:`HANDLED_LINES` more lines caught the exception (``handled``); one that stops died of it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

from rankscope.logs.prefixes import PLAIN, TORCH_RANK, Dialect, SourceLabels, split_line, torch_global_rank
from rankscope.logs.restarts import RESTART_MARKER, Attempts
from rankscope.logs.timestamps import TIMESTAMP, stamp_at

HEADER = b"Traceback (most recent call last)"
#: torchrun's failure summary: an entry's ``traceback :`` field holding the error file's traceback
#: (the rank's main wrapped in ``@record``), its continuation lines indented as deep as the field.
_SUMMARY_FIELD = re.compile(rb"^( +)traceback\s*: Traceback \(most recent call last\)")
_SUMMARY_ENTRY_RANK = re.compile(rb"\n +rank\s*: (\d+) \(local_rank: \d+\)[^\n]*\n(?:[^\n]*\n){0,6}$")
#: How far back an entry's ``rank :`` field is looked for.
SUMMARY_ENTRY_BYTES = 1024
_CHAIN_MARKERS = (b"During handling of the above exception", b"The above exception was the direct cause")
_FRAME = re.compile(rb'File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?')
_CARETS = re.compile(rb"^[\s^~]+$")
#: What an exception line looks like: ``ValueError: ...``, ``pkg.mod.Error:``, ``KeyboardInterrupt``.
_EXCEPTION_LINE = re.compile(rb"[A-Za-z_][\w.]*(?::(?:\s|$)|$)")
#: Stray lines (another stream of the same rank) skipped while waiting for the exception line.
MAX_STRAY = 50
#: Ray's wrapper of a remote task's error, in the driver's traceback: the innermost one names the
#: worker process (``ray.exceptions.RayTaskError(ValueError): ray::W.f() (pid=48907, ip=10.2.7.32, ...)``).
#: torch.multiprocessing.spawn's parent quoting a child's traceback: the line before its header.
_SPAWNED = re.compile(rb"-- Process (\d+) terminated with the following error:\s*$")
_RAY_TASK = re.compile(rb"ray\.exceptions\.\w+\([\w.]+\): ray::\S+ \(pid=(\d+), ip=([\w.:-]+)")
MAX_FRAMES = 200
#: torch's ExceptionWrapper re-raising a worker's error in the process that waited for it:
#: ``KeyError: Caught KeyError in DataLoader worker process 3.`` then ``Original Traceback (most
#: recent call last):`` and the worker's frames and error (also ``in replica 0 on device 0``,
#: ``in pin memory thread for device 0``).
_CAUGHT = re.compile(r": Caught \w+ (in .+?)\.?$")
_ORIGINAL = b"Original Traceback (most recent call last)"
#: torch.distributed.checkpoint's ``CheckpointException`` (``dcp.save``/``dcp.load``): every rank's
#: exception message carries the traceback of each rank whose step failed, each under a header
#: that names it (``Traceback (most recent call last): (RANK 1)``); the rank number is the one in the
#: checkpoint's process group (the world, unless a group was passed).
_RELAYED = re.compile(rb"\(RANK (\d+)\)\s*$")
#: The first frame line of a traceback, right after its header.
_FIRST_FRAME = b'  File "'
#: Blank or message-continuation lines tolerated while waiting to see if a chain follows.
_LOOKAHEAD = 3
#: A rank that writes this many more lines after a traceback (same source) caught the exception.
#: A process dying of an exception writes a few lines more at most (torch's
#: ``destroy_process_group() was not called`` warning, NCCL abort/destroy messages, a blank line:
#: 0 to 3 lines in the recorded GPU jobs); a rank that logged a caught exception trains on and
#: writes thousands. 100 sits far from both.
HANDLED_LINES = 100
#: Counting stops this far (bytes of the same source) after the exception line: a rank silent that
#: long is taken as dead, and the cost of counting stays bounded per traceback.
HANDLED_WINDOW = 64 << 20
#: Lines after the exception line kept as its message continuation (torch's CUDA notes, NCCL's
#: "Last error:"), searched for at most this far ahead in the block.
MAX_TAIL = 12
TAIL_REACH = 256 << 10
#: A bracket prefix at the start of a line, as counted for many undecided tracebacks at once.
_LINE_PREFIX = re.compile(rb"\n(\[[^\[\]\s]{0,200}\][: ]?)")
#: Words of a launcher's own log lines (torchrun's and torch.distributed's loggers, DeepSpeed's
#: launcher): a timestamp on one of them is the launcher's, not that of a worker's traceback after it.
_LAUNCHER_WORDS = (b"torch/distributed/", b"torch.distributed.", b"[launch.py:", b"[launcher_helper.py:")


def _launcher_line(chunk: bytes, start: int) -> bool:
    end = chunk.find(b"\n", start)
    line = chunk[start : end if end >= 0 else len(chunk)][:300]
    return any(word in line for word in _LAUNCHER_WORDS)


#: A logger's ERROR line: ``ERROR:name:msg`` (logging's default), ``... ERROR name: msg``, ``[ERROR]``.
_LOGGED = re.compile(rb"^\s*(?:ERROR:|\[ERROR\]|\S.{0,60}?\b(?:ERROR|CRITICAL)\b)")
#: The line sys.unraisablehook writes before the traceback of an exception it could not raise.
_IGNORED = b"Exception ignored in"
#: How much of the line before a traceback's header is read (a progress bar's redraw may come first).
_BEFORE_BYTES = 1024
#: More undecided tracebacks than this in a block: count all line prefixes in one pass.
BATCH_COUNT = 10


@dataclass
class FrameLine:
    filename: str
    line: int
    function: str
    code: str = ""


def reraised_from(exception: str) -> Optional[str]:
    """Where torch's ExceptionWrapper says the error was first raised (``in DataLoader worker process
    3``), for its re-raised form; None for any other exception line."""
    found = _CAUGHT.search(exception)
    return found.group(1) if found is not None else None


@dataclass
class RankTraceback:
    """One traceback of one rank, as printed (the last exception of a chain)."""

    label: Optional[bytes]
    source: str
    order: int
    line_number: int
    frames: list[FrameLine] = field(default_factory=list)
    exception: str = ""
    chained: list[str] = field(default_factory=list)
    truncated: bool = False
    #: The last timestamp the rank wrote before (or on) its traceback header, if any.
    time: Optional[str] = None
    #: The global rank from torch's ``[rankN]:`` marker on the traceback lines, if present
    #: (the launcher prefix may carry a local rank, as torchrun's --role does). torch writes the
    #: marker from its ``sys.excepthook``: the exception was not caught.
    global_rank: Optional[int] = None
    #: The lines that followed the exception line (its message continued, or whatever the rank
    #: wrote next): read for known notes, not printed.
    tail: list[str] = field(default_factory=list)
    #: The rank wrote :data:`HANDLED_LINES` more lines after it, or a later traceback: it was caught.
    handled: bool = False
    #: Lines the rank wrote after it (counted until decided; 0 when not counted).
    lines_after: int = 0
    #: The rank's line right before it was a logger's ERROR line (``logging.exception`` writes the
    #: message, then the traceback): a sign that the program caught and logged it.
    logged: bool = False
    #: Python's unraisable hook printed it (``Exception ignored in: <function X.__del__ ...>``): an
    #: exception it could not raise, never what ended the process.
    ignored: bool = False
    #: The same rank printed another traceback after it (same prefix): it lived on at least that long.
    followed: bool = False
    #: Who raised it, where the traceback has no rank prefix of its own: the worker a Ray driver's
    #: traceback names (``10.2.7.32,pid=48907``, the innermost ``RayTaskError``), or the index of
    #: the ``torch.multiprocessing.spawn`` child whose traceback its parent quotes (``2``).
    worker: Optional[str] = None
    #: How many times torchrun had restarted its workers in this source before it, as far as read
    #: when it began (rankscope.logs.restarts: settled once the source is read); 0 in the first attempt.
    attempt: int = 0
    #: Quoted by another rank for the rank that raised it (torch.distributed.checkpoint's
    #: ``CheckpointException``, ``(RANK n)``): ``label`` and ``global_rank`` are that rank's.
    relayed: bool = False
    #: The label of the rank that quoted it, for a relayed traceback.
    reporter: Optional[bytes] = None

    @property
    def uncaught(self) -> bool:
        """torch's excepthook printed it (the ``[rankN]:`` marker): it ended the process."""
        return self.global_rank is not None

    @property
    def exception_type(self) -> str:
        head = self.exception.split(":", 1)[0].strip()
        return head or "<no exception line>"

    @property
    def message(self) -> str:
        parts = self.exception.split(":", 1)
        return parts[1].strip() if len(parts) == 2 else ""


@dataclass
class _Building:
    tb: RankTraceback
    raw_prefix: bytes
    state: str = "frames"  # frames | tail | chain | after
    waited: int = 0
    #: ``b"\n" + the rank's prefix`` (without torch's marker) to count its later lines; None: not counted.
    needle: Optional[bytes] = None
    #: Where counting resumes in the current block, what was counted, how far it reached.
    count_from: int = 0
    after_lines: int = 0
    after_bytes: int = 0
    tail_end: int = 0
    #: Spaces between the prefix and the header ("[n1:3]: Traceback"): removed from the rank's
    #: following lines too, so "  File" and the exception line read as Python wrote them.
    indent: bytes = b""
    #: The frames of the exception before the last one of a chain (its cause): kept for a re-raise of
    #: the same error in another process (multiprocessing.pool's RemoteTraceback, concurrent.futures).
    cause_frames: list[FrameLine] = field(default_factory=list)


def _spawned_before(chunk: bytes, start: int) -> Optional[str]:
    """The index of the ``torch.multiprocessing.spawn`` child whose traceback starts at ``start``
    (its parent writes ``-- Process 2 terminated with the following error:`` right before it)."""
    if start == 0 or b"-- Process " not in chunk[max(0, start - 200) : start]:
        return None
    line_start = chunk.rfind(b"\n", 0, start - 1) + 1
    found = _SPAWNED.search(chunk[line_start : start - 1])
    return found.group(1).decode() if found is not None else None


def _find_all(chunk: bytes, needle: bytes) -> list[int]:
    found = []
    pos = chunk.find(needle)
    while pos >= 0:
        found.append(pos)
        pos = chunk.find(needle, pos + len(needle))
    return found


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class TracebackCollector:
    """Feed it chunks of whole lines (per source); read :attr:`tracebacks` after :meth:`finish`."""

    def __init__(self, sink: Optional[Callable[[RankTraceback], None]] = None) -> None:
        """Complete tracebacks go to ``sink``, or are kept in :attr:`tracebacks` without one."""
        self.tracebacks: list[RankTraceback] = []
        self._sink = sink if sink is not None else self.tracebacks.append
        self._labels = PLAIN
        self._allow_srun = False
        self._dialect: Optional[Dialect] = None
        self._unprefixed_frames = False
        self._active: dict[bytes, _Building] = {}
        self._order = 0
        self._source = ""
        self._lines_before = 0
        #: Per source: torchrun's restarts of its workers (its attempts).
        self.restarts: dict[str, Attempts] = {}
        self._attempts = Attempts()
        self._consumed: set[int] = set()
        self._chunk_has_times = False
        self._cursor = (0, 0)
        #: Lines after this point of the block are not counted (a torchrun restart).
        self._count_limit = 0

    def start_source(self, name: str, labels: SourceLabels = PLAIN) -> None:
        self.finish()
        self._source = name
        self._labels = labels
        self._allow_srun = labels.allow_srun
        self._dialect = labels.dialect
        #: sglang logs a traceback as one message: the header ends its prefixed line, the rest has no prefix
        self._unprefixed_frames = labels.dialect is not None and labels.dialect.name == "sglang"
        self._lines_before = 0
        self._attempts = self.restarts.setdefault(name, Attempts())

    def feed(self, chunk: bytes, lines: Optional[int] = None, unprefixed: int = 1) -> None:
        """Read one block of whole lines (``lines``: its newline count, when the caller has it;
        ``unprefixed``: how many of its lines carry no rank prefix, when the caller has counted them)."""
        # Tracebacks still open from the previous chunk continue from its start.
        self._consumed = set()
        self._cursor = (0, 0)
        self._chunk_has_times = TIMESTAMP.search(chunk, 0, 1 << 16) is not None
        # torchrun's agent writes the restart line without a rank prefix (unless a launcher
        # prefixes every line: srun --label, a dialect)
        agent_lines = unprefixed or self._allow_srun or self._dialect is not None
        restart = chunk.find(RESTART_MARKER) if agent_lines else -1
        self._count_limit = len(chunk) if restart < 0 else restart
        self._attempts.feed(chunk if agent_lines else b"", lambda pos: self._line_number(chunk, pos))
        self._cursor = (0, 0)
        for building in list(self._active.values()):
            building.count_from = 0
            if building.state == "frames":
                self._follow(chunk, building, 0)
        # Headers and chain markers, in the order they appear: a marker turns a finished
        # traceback of its rank into a chain that the rank's next header continues.
        events = [(pos, True) for pos in _find_all(chunk, HEADER)]
        if events or any(b.state in ("after", "tail") for b in self._active.values()):
            # A chain marker follows a finished traceback: with none open and no header in the
            # block there is nothing it could continue. Both markers contain "he above exception"
            # (the longer the needle, the faster bytes.find skips).
            events.extend((pos, False) for pos in _find_all(chunk, b"he above exception"))
        events.sort()
        for pos, is_header in events:
            start = chunk.rfind(b"\n", 0, pos) + 1
            end = chunk.find(b"\n", pos)
            end = len(chunk) if end < 0 else end
            split = split_line(chunk[start:end], self._allow_srun, self._dialect)
            if not is_header:
                waiting = self._active.get(split.raw_prefix)
                if (
                    waiting is not None
                    and waiting.state == "after"
                    and split.text.strip().startswith(_CHAIN_MARKERS)
                ):
                    self._count_after(chunk, waiting, start)
                    waiting.state = "chain"
            elif start not in self._consumed and split.text.lstrip(b" ").startswith(HEADER):
                indent = split.text[: len(split.text) - len(split.text.lstrip(b" "))]
                self._begin(chunk, start, end, split.raw_prefix, split.label, indent)
            elif start not in self._consumed and (field := _SUMMARY_FIELD.match(split.text)) is not None:
                # torchrun's failure summary quoting a rank's error file (``@record``): its lines are
                # the field's indentation deeper than the traceback's own
                self._begin(chunk, start, end, split.raw_prefix, split.label, field.group(1))
                building = self._active[split.raw_prefix]
                rank = _SUMMARY_ENTRY_RANK.search(chunk, max(0, start - SUMMARY_ENTRY_BYTES), start)
                if rank is not None and building.tb.global_rank is None:
                    building.tb.global_rank = int(rank.group(1))
            elif (
                self._unprefixed_frames
                and start not in self._consumed
                and split.text.rstrip().endswith(HEADER + b":")
            ):
                # a logger's message that ends in a traceback ("[... TP1] Scheduler hit an
                # exception: Traceback (most recent call last):"): its frames follow without the
                # prefix, so they are read as the lines without one, for this rank's label
                self._begin(chunk, start, end, b"", split.label)
            elif (
                not split.raw_prefix
                and start not in self._consumed
                and split.text.rstrip().endswith(HEADER + b":")
                and chunk.startswith(_FIRST_FRAME, end + 1)
            ):
                # a header written after another process's unfinished line in a shared, unprefixed
                # console ("step 10Traceback (most recent call last):": print writes its text and
                # its newline apart under PYTHONUNBUFFERED=1); its frames follow on lines of their own
                self._begin(chunk, start, end, b"", None)
        self._settle(chunk, restarted=restart >= 0)
        self._lines_before += chunk.count(b"\n") if lines is None else lines

    def continued_line(self) -> None:
        """The chunk just fed was a later piece of a cut line: not a line of its own."""
        self._lines_before -= 1

    def completed_open(self) -> list[RankTraceback]:
        """The tracebacks whose exception line was read and that are not decided yet (caught, or the
        rank died of it): what a reader that follows a live log acts on at once."""
        return [b.tb for b in self._active.values() if b.tb.exception and b.state in ("tail", "after")]

    def finish(self) -> None:
        for building in self._active.values():
            tb = building.tb
            tb.lines_after = building.after_lines
            tb.truncated = building.state == "frames" or (building.state == "chain" and not tb.exception)
            self._sink(tb)
        self._active.clear()

    # -- internals ---------------------------------------------------------------------

    def _begin(
        self,
        chunk: bytes,
        start: int,
        end: int,
        raw_prefix: bytes,
        label: Optional[bytes],
        indent: bytes = b"",
    ) -> None:
        key = raw_prefix
        existing = self._active.get(key)
        if existing is not None:
            if existing.state == "chain":
                # The header is the next part of a chain this rank is already printing.
                if existing.tb.exception:
                    existing.tb.chained.append(existing.tb.exception)
                existing.cause_frames = existing.tb.frames
                existing.tb.frames = []
                existing.tb.exception = ""
                existing.tb.tail = []
                existing.state = "frames"
                existing.after_lines = existing.after_bytes = 0
                self._follow(chunk, existing, end + 1)
                return
            if existing.state == "after":
                self._count_after(chunk, existing, start)
                existing.tb.handled = existing.after_lines >= HANDLED_LINES
                existing.tb.followed = True  # the rank printed another traceback after it
            self._close(key, truncated=existing.state == "frames")
        cut = raw_prefix.find(b"[rank", 1)
        other = self._active.get(raw_prefix[:cut]) if cut > 0 else None
        if other is not None and other.state == "after":
            # the same rank's traceback under torch's marker (its excepthook printed it) after one
            # without it: the earlier one was printed by the program, caught
            self._count_after(chunk, other, start)
            other.tb.handled = True
            self._close(raw_prefix[:cut])
        self._order += 1
        line_number = self._line_number(chunk, start)
        tb = RankTraceback(
            label=self._labels.label(label),
            source=self._source,
            order=self._order,
            line_number=line_number,
        )
        tb.time = self._time_before(chunk, start, raw_prefix)
        before = self._line_before(chunk, start, raw_prefix)
        tb.logged = _LOGGED.search(before[:200]) is not None
        # sys.unraisablehook's report of an exception it could not raise (in __del__, a weakref
        # callback, a thread's cleanup): Python printed it and went on (after a progress bar's
        # redraw, with no newline between, as often as not)
        tb.ignored = _IGNORED in before
        tb.worker = _spawned_before(chunk, start)
        tb.attempt = self._attempts.at(start)
        tb.global_rank = torch_global_rank(raw_prefix)
        relayed = _RELAYED.search(chunk, start, end)
        if relayed is not None:
            # another rank's failure, quoted in a CheckpointException: it is that rank's
            tb.reporter, tb.label = tb.label, relayed.group(1)
            tb.global_rank = int(relayed.group(1))
            tb.relayed = True
        if tb.global_rank is None and not raw_prefix and tb.worker is not None and tb.worker.isdigit():
            # mp.spawn's process index is the rank its function gets (``mp.spawn(fn, nprocs=N)`` calls ``fn(i)``)
            tb.global_rank = int(tb.worker)
        building = _Building(
            tb, raw_prefix, needle=self._needle(raw_prefix, tb.global_rank is not None), indent=indent
        )
        self._active[key] = building
        self._follow(chunk, building, end + 1)

    def _needle(self, raw_prefix: bytes, uncaught: bool) -> Optional[bytes]:
        """What to count to see whether the rank writes on: its prefix without torch's marker
        (the rank's ordinary lines carry the outer prefix alone, whatever its traceback carries).

        None (not counted) for lines without a prefix unless the whole source is one rank's (a
        torchrun --log-dir file): there, other ranks write too; and for torch's marker alone
        (``[rank3]: ...`` with nothing around it: the rank's other lines carry no prefix at all).
        """
        if not raw_prefix or (uncaught and raw_prefix.startswith(b"[rank")):
            if uncaught:
                return None
            return b"\n" if self._labels.fixed_label is not None else None
        outer = raw_prefix
        for inner in (b"[rank", b"<std"):
            cut = outer.find(inner, 1)
            if cut > 0:
                outer = outer[: cut if inner == b"[rank" else cut + len(inner)]
        return b"\n" + outer

    def _count_after(self, chunk: bytes, building: _Building, upto: int) -> None:
        """Add the rank's lines from where counting stopped up to ``upto`` in this block."""
        needle = building.needle
        upto = min(upto, self._count_limit)
        if needle is None or upto <= building.count_from:
            return
        lines = chunk.count(needle, building.count_from, upto)
        if building.count_from == 0 and chunk.startswith(needle[1:]) and len(needle) > 1:
            lines += 1
        building.after_lines += lines
        building.after_bytes += upto - building.count_from
        building.count_from = upto

    def _settle(self, chunk: bytes, restarted: bool) -> None:
        """At the end of a block: decide the finished tracebacks whose rank wrote on, or went quiet."""
        pending = [b for b in self._active.values() if b.state == "after" and b.needle is not None]
        batch = [b for b in pending if b.count_from == 0 and _LINE_PREFIX.fullmatch(b.needle or b"")]
        if len(batch) > BATCH_COUNT:
            # Many ranks undecided at once (a crash with the log going on): one pass over the
            # block's line prefixes costs what about 10 separate counts do.
            limit = self._count_limit
            counted = Counter(_LINE_PREFIX.findall(chunk, 0, limit))
            first = _LINE_PREFIX.match(b"\n" + chunk[:256])
            if first is not None and limit > 0:
                counted[first.group(1)] += 1
            for building in batch:
                building.after_lines += counted.get((building.needle or b"")[1:], 0)
                building.after_bytes += limit
                building.count_from = limit
        for key, building in list(self._active.items()):
            if building.state != "after" or building.needle is None:
                continue
            before_restart = building.count_from <= self._count_limit
            self._count_after(chunk, building, len(chunk))
            if building.after_lines >= HANDLED_LINES:
                building.tb.handled = True
                self._close(key)
            elif building.after_bytes > HANDLED_WINDOW or (restarted and before_restart):
                self._close(key)

    def _time_before(self, chunk: bytes, start: int, raw_prefix: bytes) -> Optional[str]:
        """A timestamp on the header line or on one of the rank's few lines before it (this chunk,
        at most 64 KiB back; nothing is searched in chunks whose first 64 KiB have no timestamp)."""
        if not self._chunk_has_times:
            return None
        floor = max(0, start - (1 << 16))
        outer = raw_prefix[: raw_prefix.find(b"[rank", 1)] if raw_prefix.find(b"[rank", 1) > 0 else raw_prefix
        pos = start
        for _ in range(4):
            stamp = stamp_at(chunk, pos + len(outer)) if chunk.startswith(outer, pos) else None
            if stamp is not None:
                # without a rank in the prefix (none, or a node's), a launcher's own line is not the
                # rank's: its time is not the error's
                launcher = b"rank" not in outer and _launcher_line(chunk, pos + len(outer))
                return None if launcher else stamp
            if pos == 0:
                return None
            if outer:
                found = chunk.rfind(b"\n" + outer, floor, pos - 1)
                pos = found + 1 if found >= 0 else (0 if floor == 0 and chunk.startswith(outer) else -1)
            else:
                pos = chunk.rfind(b"\n", 0, pos - 1) + 1
            if pos < 0:
                return None
        return None

    def _line_before(self, chunk: bytes, start: int, raw_prefix: bytes) -> bytes:
        """The rank's line just before ``start`` (this block, 64 KiB back at most), its first
        :data:`_BEFORE_BYTES` without the prefix; empty where there is none."""
        cut = raw_prefix.find(b"[rank", 1)
        outer = raw_prefix[:cut] if cut > 0 else raw_prefix
        if start == 0:
            return b""
        if not outer:  # no prefix: the line right before it (logging.exception writes both at once)
            found = chunk.rfind(b"\n", max(0, start - 4096), start - 1)
            if found < 0 and start > 4096:
                return b""
            return chunk[found + 1 : min(start - 1, found + 1 + _BEFORE_BYTES)]
        found = chunk.rfind(b"\n" + outer, max(0, start - (1 << 16)), start - 1)
        line_start = found + 1 if found >= 0 else (0 if chunk.startswith(outer) else -1)
        if line_start < 0:
            return b""
        line = chunk[line_start + len(outer) : start - 1][:_BEFORE_BYTES]
        inner = TORCH_RANK.match(line)  # torch's marker inside a launcher's prefix
        return line[inner.end() :] if inner is not None else line

    def _line_number(self, chunk: bytes, start: int) -> int:
        """1-based line number of ``start``; counts only from the last position asked about."""
        pos, lines = self._cursor
        if start < pos:
            pos, lines = 0, 0
        lines += chunk.count(b"\n", pos, start)
        self._cursor = (start, lines)
        return self._lines_before + lines + 1

    def _close(self, key: bytes, truncated: bool = False) -> None:
        building = self._active.pop(key)
        building.tb.truncated = truncated
        building.tb.lines_after = building.after_lines
        self._sink(building.tb)

    def _next_line(self, chunk: bytes, raw_prefix: bytes, start: int, stop: int = -1) -> tuple[int, int]:
        """Start and end of the next line at or after ``start`` (before ``stop``) that carries ``raw_prefix``."""
        stop = len(chunk) if stop < 0 else min(stop, len(chunk))
        if start >= stop:
            return (-1, -1)
        if not raw_prefix:
            # No prefix: the next line without a recognised prefix.
            while start < stop:
                end = chunk.find(b"\n", start)
                end = len(chunk) if end < 0 else end
                if (
                    self._labels.fixed_label is not None
                    or split_line(chunk[start:end], self._allow_srun, self._dialect).label is None
                ):
                    return (start, end)
                start = end + 1
            return (-1, -1)
        if start == 0 and chunk.startswith(raw_prefix):
            line_start = 0
        else:
            found = chunk.find(b"\n" + raw_prefix, start - 1 if start > 0 else 0, stop)
            if found < 0:
                return (-1, -1)
            line_start = found + 1
        end = chunk.find(b"\n", line_start)
        return (line_start, len(chunk) if end < 0 else end)

    def _follow(self, chunk: bytes, building: _Building, start: int) -> None:
        key = building.raw_prefix
        while True:
            stop = building.tail_end if building.state == "tail" else -1
            line_start, line_end = self._next_line(chunk, key, start, stop)
            if line_start < 0:
                if building.state == "tail":
                    building.state = "after"  # the message continues no further in this block
                return
            start = line_end + 1
            text = split_line(chunk[line_start:line_end], self._allow_srun, self._dialect).text
            if building.indent and text.startswith(building.indent):
                text = text[len(building.indent) :]
            was_chain = building.state == "chain"
            if not self._step(building, text):
                # in its frames, only a new header ends it: the traceback was cut off before its
                # exception line (ranks' tracebacks interleaved in one unprefixed console)
                self._close(key, truncated=building.state == "frames")
                return
            if was_chain and building.state == "frames":
                self._consumed.add(line_start)  # a chained header, not a new traceback
            if building.state == "tail" and not building.tail_end:
                # The exception line: read on a few lines (its message may continue), and
                # count the rank's lines from here to see whether it lived on.
                building.count_from = line_end
                building.tail_end = line_end + TAIL_REACH
            if building.state == "after":
                # Complete unless a chain marker of this rank follows: feed() finds those
                # markers (and the rank's next header closes it), so no search ahead here.
                return

    def _step(self, building: _Building, text: bytes) -> bool:
        """Advance one line; False when the traceback is complete (the line is not part of it)."""
        tb = building.tb
        stripped = text.strip()
        if building.state == "tail":
            if stripped.startswith(_ORIGINAL) and tb.exception and _CAUGHT.search(tb.exception):
                # torch's ExceptionWrapper (DataLoader workers, DataParallel replicas): the error
                # re-raised in the rank, then the worker's own traceback: its frames and its error
                tb.chained.append(tb.exception)
                tb.exception, tb.tail = "", []
                building.state = "frames"
                building.tail_end = 0
                return True
            if not stripped or stripped.startswith(HEADER):
                building.state = "after"
            elif stripped.startswith(_CHAIN_MARKERS):
                building.state = "chain"
            else:
                tb.tail.append(_decode(stripped[:1000]))
                if len(tb.tail) >= MAX_TAIL:
                    building.state = "after"
            return True
        if building.state == "after":
            if stripped.startswith(_CHAIN_MARKERS):
                building.state = "chain"
                return True
            if not stripped and building.waited < _LOOKAHEAD:
                building.waited += 1
                return True
            return False
        if not stripped:
            return True
        if stripped.startswith(HEADER):
            if building.state == "chain":
                if tb.exception:
                    tb.chained.append(tb.exception)
                building.cause_frames = tb.frames
                tb.frames, tb.exception, tb.tail = [], "", []
                building.state = "frames"
                building.tail_end = 0
                # the lines between the parts of a chain (the marker, blank lines) are the
                # traceback's own, not lines the rank wrote on after it
                building.after_lines = building.after_bytes = 0
                return True
            return False  # a new traceback of the same rank; _begin opens it
        if building.state == "chain":
            return True
        if text[:1] in (b" ", b"\t"):
            frame = _FRAME.match(stripped)
            if frame is not None:
                if len(tb.frames) < MAX_FRAMES:
                    tb.frames.append(
                        FrameLine(
                            _decode(frame.group("file")),
                            int(frame.group("line")),
                            _decode(frame.group("func") or b"?"),
                        )
                    )
            elif tb.frames and not tb.frames[-1].code and not _CARETS.match(stripped):
                tb.frames[-1].code = _decode(stripped)
            return True
        ray_task = _RAY_TASK.match(stripped)
        if ray_task is not None:
            # Ray's remote traceback goes on below its wrapper: the frames are the worker's
            tb.worker = f"{_decode(ray_task.group(2))},pid={int(ray_task.group(1))}"
            return True
        if not _EXCEPTION_LINE.match(stripped) and building.waited < MAX_STRAY:
            building.waited += 1  # e.g. the rank's stdout print landing inside its stderr traceback
            return True
        tb.exception = _decode(stripped)
        if tb.chained and tb.chained[-1] == tb.exception and building.cause_frames:
            # the same error raised again where its result was awaited (pool.map, a future's result):
            # the frames where it was first raised come after the ones that awaited it
            tb.frames = (tb.frames + building.cause_frames)[-MAX_FRAMES:]
        building.state = "tail"
        building.tail_end = 0
        building.waited = 0
        return True

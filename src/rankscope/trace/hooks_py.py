"""The tracer's event callbacks in pure Python: where the C extension is not built, or with
``RANKSCOPE_TRACE_PURE=1`` (:mod:`rankscope.trace.backend` chooses).

Each family of callbacks is a set of closures over the file's words (fast locals, no attribute
lookups per event). All writers of a family share one write position ``pos`` (a word index, a
multiple of 3, always < ``end``), so no store can fall outside the ring whatever threads
interleave; two threads racing for one slot may tear that one record, which a flight recorder
accepts. The callbacks repeat the same few lines on purpose: this is the per-event path, and a
shared helper (or a position kept anywhere but in the closure) would add work to every traced call
and return.

Python 3.9, standard library only; nothing here raises into the traced program.
"""

from __future__ import annotations

import sys
from _thread import get_ident
from time import perf_counter_ns

from rankscope.trace import format as fmt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from rankscope.trace.tracer import Tracer


def monitoring_hooks(tracer: Tracer) -> dict[str, Any]:
    """``sys.monitoring`` callbacks (Python >= 3.12): code filtered out returns DISABLE on its first
    event; ``emit``/``position``/``halt`` for the tracer's own records."""
    buf, end, wrap = tracer.file.words, tracer.file.end, tracer.lap
    get, intern = tracer._ids.get, tracer.intern
    clock, ident = perf_counter_ns, get_ident
    DISABLE = sys.monitoring.DISABLE  # type: ignore[attr-defined]
    pos = 0

    def emit(word: int, tid: int = 0, when: int = 0) -> None:
        nonlocal pos
        i = pos
        buf[i] = when or clock()
        buf[i + 1] = word
        buf[i + 2] = tid or ident()
        i += 3
        if i >= end:
            pos = 0  # the lap's whole stacks are written from the start
            i = wrap()
        pos = i

    def position() -> int:
        return pos

    def halt() -> None:
        """Nothing to flag: the tracer switches the tool's events off."""

    def on_start(code: Any, offset: int) -> Any:
        nonlocal pos
        k = get(id(code))
        if k is None:
            k = intern(code)
        if k < 0:
            return DISABLE
        i = pos
        buf[i] = clock()
        buf[i + 1] = k | 1
        buf[i + 2] = ident()
        i += 3
        if i >= end:
            pos = 0
            i = wrap()
        pos = i
        return None

    def on_return(code: Any, offset: int, retval: Any) -> Any:
        nonlocal pos
        k = get(id(code))
        if k is None:
            k = intern(code)
        if k < 0:
            return DISABLE
        i = pos
        buf[i] = clock()
        buf[i + 1] = k | 2
        buf[i + 2] = ident()
        i += 3
        if i >= end:
            pos = 0
            i = wrap()
        pos = i
        return None

    def on_unwind(code: Any, offset: int, exc: Any) -> None:
        k = get(id(code))
        if k is not None and k >= 0:
            emit(k | fmt.UNWIND)

    def on_line(code: Any, line: int) -> Any:
        nonlocal pos
        k = get(id(code))
        if k is None:
            k = intern(code)
        if k < 0:
            return DISABLE
        i = pos
        buf[i] = clock()
        buf[i + 1] = (k & -0x100000000) | ((line & 0xFFFFFF) << 8) | 3
        buf[i + 2] = ident()
        i += 3
        if i >= end:
            pos = 0
            i = wrap()
        pos = i
        return None

    return {
        "emit": emit,
        "position": position,
        "halt": halt,
        "start": on_start,
        "return": on_return,
        "unwind": on_unwind,
        "line": on_line,
    }


def settrace_hooks(tracer: Tracer) -> dict[str, Any]:
    """settrace functions (Python < 3.12), one pair per thread (``for_thread``): the global one sees
    calls only, a traced frame gets the local one for its returns (and lines); ``emit``/``position``/
    ``halt`` for the tracer's own records, ``halt`` also ends the global one's tracing."""
    buf, end, wrap = tracer.file.words, tracer.file.end, tracer.lap
    get, intern = tracer._ids.get, tracer.intern
    clock, ident = perf_counter_ns, get_ident
    trace_lines = tracer.lines
    pos = 0
    halted = False

    def emit(word: int, tid: int = 0, when: int = 0) -> None:
        nonlocal pos
        i = pos
        buf[i] = when or clock()
        buf[i + 1] = word
        buf[i + 2] = tid or ident()
        i += 3
        if i >= end:
            pos = 0  # the lap's whole stacks are written from the start
            i = wrap()
        pos = i

    def position() -> int:
        return pos

    def halt() -> None:
        nonlocal halted
        halted = True

    def for_thread(tid: int) -> Callable[..., Any]:
        """The settrace functions of one thread, with its ident baked in (no call per event)."""

        def local(frame: Any, event: str, arg: Any) -> Any:
            nonlocal pos
            if event == "return":
                kind = 2
                k = get(id(frame.f_code), 0)
            elif event == "line":
                k = get(id(frame.f_code), 0)
                kind = ((frame.f_lineno & 0xFFFFFF) << 8) | 3
                k &= -0x100000000
            else:
                return local
            i = pos
            buf[i] = clock()
            buf[i + 1] = k | kind
            buf[i + 2] = tid
            i += 3
            if i >= end:
                pos = 0
                i = wrap()
            pos = i
            return local

        def on_call(frame: Any, event: str, arg: Any) -> Any:
            nonlocal pos
            if halted:
                sys.settrace(None)
                return None
            code = frame.f_code
            k = get(id(code))
            if k is None:
                k = intern(code)
            if k < 0:
                return None
            frame.f_trace_lines = trace_lines
            i = pos
            buf[i] = clock()
            buf[i + 1] = k | 1
            buf[i + 2] = tid
            i += 3
            if i >= end:
                pos = 0
                i = wrap()
            pos = i
            return local

        on_call.local = local  # type: ignore[attr-defined]  # for frames open when tracing starts
        return on_call

    return {"emit": emit, "position": position, "halt": halt, "for_thread": for_thread}

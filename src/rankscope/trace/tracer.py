"""The in-process tracer: which code is traced, the event hooks, the sampling thread.

Python 3.9, standard library only, and it never raises into the traced program: every hook
writes three words into the trace file's memory-mapped ring and returns.

Hooks, cheapest correct one per Python version (bench/bench_trace.py, docs/trace.md):

- Python >= 3.12: ``sys.monitoring`` PY_START/PY_RETURN (LINE with ``lines``). Code that is
  filtered out returns ``DISABLE`` on its first event, so it runs at full speed afterwards.
- Python 3.9-3.11: ``sys.settrace``. Its global function only sees calls; a filtered-out frame gets
  no local function, so it costs one callback per call and nothing for its returns, lines or the C
  functions it calls (``sys.setprofile`` would see the return and every C call of every frame,
  excluded ones included: more callbacks on a torch loop). Traced frames get
  ``f_trace_lines = False`` unless ``lines``. Threads started after ``start()`` are traced
  (``threading.settrace``); threads already running are not (``sys.monitoring`` sees all).

The callbacks themselves come from :mod:`rankscope.trace.backend`, which chooses once per session
between the C extension (:mod:`rankscope.trace.hooks_c`) and pure Python
(:mod:`rankscope.trace.hooks_py`); this module installs and removes them.

At the start and at every lap of the ring (every chunk of ``--full``) each traced thread's whole
stack is written (:meth:`Tracer.whole_stacks`), so a reader rebuilds the open calls after a wrap.

Per event: one dict lookup keyed by ``id(code)`` (a code object's own hash walks its bytecode and
constants: 4x slower on 3.11, 15x on 3.12), one clock read, three stores into the ``Q``
memoryview, no allocation. Code objects are kept alive once seen, so their ids are never reused.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from _thread import get_ident
from time import perf_counter_ns, time_ns

from rankscope.trace import format as fmt
from rankscope.trace.backend import MONITORING, choose
from rankscope.trace.writer import TraceFile, trace_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, Callable, Optional

#: Deepest stack a sample keeps (innermost frames).
SAMPLE_DEPTH = 64
#: A sampled stack equal to the previous one is written as one SAME record, but in full at least this often.
SAMPLE_REFRESH_NS = 1_000_000_000


def _excluded_dirs() -> list[str]:
    """The standard library, site-packages and rankscope itself (the guide ignores sys.prefix, sys.exec_prefix)."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix), sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            dirs.add(sysconfig.get_paths()[key])
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    dirs.update(p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")))
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # rankscope's own package
    out = set()
    for d in dirs:
        if d:
            out.add(os.path.join(os.path.abspath(d), ""))
            out.add(os.path.join(os.path.realpath(d), ""))
    return sorted(out)


def _included_dirs(packages: Iterable[str]) -> list[str]:
    """Where each ``--include`` package lives (its directory, or its module file)."""
    import importlib.util

    out = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                out.append(os.path.join(os.path.abspath(d), ""))
                out.append(os.path.join(os.path.realpath(d), ""))
        elif spec.origin:
            out.append(os.path.abspath(spec.origin))
            out.append(os.path.realpath(spec.origin))
    return out


class CodeFilter:
    """The user's own code (not the standard library, site-packages or rankscope) plus ``include`` packages."""

    def __init__(self, include: Iterable[str] = ()) -> None:
        self.include = tuple(include)
        self.included = tuple(_included_dirs(self.include))
        self.excluded = tuple(_excluded_dirs())
        # packages that could not be found by name are matched by a path segment
        self.segments = tuple(f"/{name.replace('.', '/')}/" for name in self.include)
        self._cache: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        verdict = self._cache.get(filename)
        if verdict is None:
            verdict = self._decide(filename)
            self._cache[filename] = verdict
        return verdict

    def _decide(self, filename: str) -> bool:
        if filename.startswith("<"):
            return False  # <frozen ...>, <string>: generated code
        for path in (os.path.abspath(filename), os.path.realpath(filename)):
            if path.startswith(self.included) or any(seg in path for seg in self.segments):
                return True
            if path.startswith(self.excluded):
                return False
        return True


class Tracer:
    """One tracing session writing one file. Use :func:`rankscope.trace.start`, not this class."""

    def __init__(
        self,
        out: str,
        include: Iterable[str] = (),
        lines: bool = False,
        full: bool = False,
        sample_ms: Optional[float] = None,
        calls: bool = True,
        ring_records: int = fmt.DEFAULT_RING_RECORDS,
        names_bytes: int = fmt.DEFAULT_NAMES_BYTES,
    ) -> None:
        from rankscope.ranks import current_rank

        self.filter = CodeFilter(include)
        self.lines = lines
        self.calls = calls
        self.sample_ms = sample_ms
        #: The C extension's hooks or the pure-Python ones (rankscope.trace.backend).
        self.backend = choose(lines)
        rank = current_rank()
        os.makedirs(out, mode=0o700, exist_ok=True)
        pid = os.getpid()
        self.path = os.path.join(os.path.abspath(out), trace_name(rank.host, rank.rank, pid))
        flags = (
            (0 if full else fmt.FLAG_RING)
            | (fmt.FLAG_LINES if lines else 0)
            | (fmt.FLAG_SAMPLE if sample_ms else 0)
            | (fmt.FLAG_CALLS if calls else 0)
        )
        meta = {
            "host": rank.host,
            "rank": rank.rank,
            "local_rank": rank.local_rank,
            "world_size": rank.world_size,
            "pid": pid,
            "thread": get_ident(),
            "argv": sys.argv[:16],
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "hook": self.backend.hook_name() if calls else "none",
            "include": list(self.filter.include),
            "sample_ms": sample_ms,
            "wall_ns": time_ns(),
            "clock_ns": perf_counter_ns(),
        }
        base = self.path
        for session in range(2, 1000):  # a later session of the same process: trace-...-PID.2, .3, ...
            try:
                self.file = TraceFile(
                    self.path,
                    ring=not full,
                    capacity=ring_records,
                    names_bytes=min(names_bytes, fmt.NAMES_MAX),
                    flags=flags,
                    meta=meta,
                )
                break
            except FileExistsError:
                self.path = f"{base}.{session}"
        self._codes: list[Any] = []  # keeps every interned code object alive: ids are never reused
        self._ids: dict[int, int] = {}  # id(code) -> key for call events (< 0: filtered out)
        self._sample_ids: dict[int, int] = {}  # id(code) -> key for samples (every code)
        self._next_id = 1
        self._sampler: Optional[threading.Thread] = None
        self._stop_sampler = threading.Event()
        self._tool: Optional[int] = None
        self._ring: Any = None  # the C hot path, where it is built
        #: threads running before tracing started, which settrace/setprofile never reach (< 3.12)
        self._untraced: set[int] = set()
        self._thread_names: dict[tuple[int, str], int] = {}
        self._hooks = self.backend.make_hooks(self)
        self.hot_path = "c" if self._ring is not None else "python"
        self.running = False
        self.file.on_failure = self._switch_off

    def _switch_off(self, reason: str) -> None:
        """The file cannot be written (a full disk): stop recording, say so once, let the program go on.

        Called from inside an event hook, on whatever thread wrote the event: it only flips flags and
        removes hooks (each step guarded), never raises and never waits.
        """
        steps: list[Callable[[], Any]] = [self._hooks["halt"], self._stop_sampler.set]
        if self.calls and MONITORING and self._tool is not None:
            tool = self._tool
            steps.append(lambda: sys.monitoring.set_events(tool, 0))  # type: ignore[attr-defined]
        elif self.calls:
            steps += [
                lambda: threading.settrace(None),  # type: ignore[arg-type,unused-ignore]
                lambda: threading.setprofile(None),  # type: ignore[arg-type,unused-ignore]
            ]
        for step in steps:
            with contextlib.suppress(Exception):
                step()
        with contextlib.suppress(Exception):
            message = f"rankscope.trace: tracing switched off, {self.path}: {reason} (the program goes on)\n"
            os.write(2, message.encode("utf-8", "replace"))

    # -- code ids ---------------------------------------------------------------------------------
    def _new_id(self, code: Any) -> int:
        code_id = self._next_id
        self._next_id += 1
        self._codes.append(code)
        self.file.add_name(code_id, code.co_filename, code.co_firstlineno, code.co_name)
        return code_id

    def intern(self, code: Any) -> int:
        """The key of a code object for call events: ``id << 32 | firstline << 8``, or -1 when filtered out."""
        key = self._ids.get(id(code))
        if key is not None:  # the C table and the whole stacks both intern: one key per code object
            return key
        try:
            if self.filter(code.co_filename):
                key = (self._new_id(code) << 32) | ((code.co_firstlineno & 0xFFFFFF) << 8)
            else:
                self._codes.append(code)
                key = -1
        except Exception:  # never into the traced program
            key = -1
        self._ids[id(code)] = key
        return key

    def sample_key(self, code: Any) -> int:
        key = self._sample_ids.get(id(code))
        if key is None:
            key = self._new_id(code) << 32
            self._sample_ids[id(code)] = key
        return key

    # -- start / stop -----------------------------------------------------------------------------
    def start(self) -> None:
        emit = self._hooks["emit"]
        emit(fmt.MARK | (fmt.MARK_START << 8))
        if self.calls:
            if MONITORING:
                self._start_monitoring()
            else:
                self._untraced = set(sys._current_frames()) - {get_ident()}
                self._start_settrace()
            self.whole_stacks()  # the calls already open (a region started inside a function)
        _progress_hook(self.progress)
        if self.sample_ms:
            self._sampler = threading.Thread(
                target=self._sample_loop, name="rankscope-trace-sampler", daemon=True
            )
            self._sampler.start()
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        _progress_hook(None)
        if self._sampler is not None:
            self._stop_sampler.set()
            self._sampler.join(timeout=2.0)
        if self.calls:
            if MONITORING:
                self._stop_monitoring()
            elif self._ring is not None:
                self._ring.halt()
                threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
                threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]
                sys.settrace(None)
                self._ring.uninstall()
            else:
                self._hooks["halt"]()
                threading.settrace(None)  # type: ignore[arg-type,unused-ignore]
                sys.settrace(None)
        self._hooks["emit"](fmt.MARK | (fmt.MARK_STOP << 8))
        self.file.close(self._hooks["position"]())

    def _start_monitoring(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in (mon.PROFILER_ID, 3, 4):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "rankscope-trace")
                self._tool = tool
                break
        else:
            raise RuntimeError("every sys.monitoring profiler slot is taken by another tool")
        ev = mon.events
        # a generator's resume is a call and its yield a return, as settrace and setprofile see them:
        # a suspended generator is not an open call
        events = ev.PY_START | ev.PY_RETURN | ev.PY_UNWIND | ev.PY_RESUME | ev.PY_YIELD
        mon.register_callback(self._tool, ev.PY_START, self._hooks["start"])
        mon.register_callback(self._tool, ev.PY_RESUME, self._hooks["start"])
        mon.register_callback(self._tool, ev.PY_RETURN, self._hooks["return"])
        mon.register_callback(self._tool, ev.PY_YIELD, self._hooks["return"])
        mon.register_callback(self._tool, ev.PY_UNWIND, self._hooks["unwind"])
        if self.lines:
            mon.register_callback(self._tool, ev.LINE, self._hooks["line"])
            events |= ev.LINE
        mon.restart_events()  # locations another session disabled are traced again
        mon.set_events(self._tool, events)

    def _stop_monitoring(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        tool = self._tool
        if tool is None:
            return
        mon.set_events(tool, 0)
        ev = mon.events
        for event in (ev.PY_START, ev.PY_RESUME, ev.PY_RETURN, ev.PY_YIELD, ev.PY_UNWIND, ev.LINE):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
        self._tool = None

    def _start_settrace(self) -> None:
        ring = self._ring
        if ring is not None and self.backend.profile:  # the C profile function, per thread

            def install(frame: Any, event: str, arg: Any) -> None:
                ring.install()

            threading.setprofile(install)
            ring.install()
            return
        if ring is not None:  # the C settrace function: one object for every thread
            hook = self.backend.c.TraceHook(ring, self.lines)
            threading.settrace(hook)
            sys.settrace(hook)
            self._trace_open_frames(hook)
            return
        for_thread = self._hooks["for_thread"]

        def bootstrap(frame: Any, event: str, arg: Any) -> Any:
            hook = for_thread(get_ident())
            sys.settrace(hook)
            return hook(frame, event, arg)

        threading.settrace(bootstrap)
        first = for_thread(get_ident())
        sys.settrace(first)
        self._trace_open_frames(first.local)

    def _trace_open_frames(self, local: Any) -> None:
        """settrace reaches only frames entered later: the traced frames already open in this thread
        get the local function too, so their returns are recorded (a profile function and
        sys.monitoring see them anyway)."""
        frame: Any = sys._getframe(1)
        while frame is not None:
            with contextlib.suppress(Exception):
                if self.intern(frame.f_code) >= 0:
                    frame.f_trace_lines = self.lines
                    frame.f_trace = local
            frame = frame.f_back

    # -- whole stacks -----------------------------------------------------------------------------
    def lap(self) -> int:
        """The ring is full (``--full``: its chunk is written): start the next lap with every traced
        thread's whole stack. Called from the hooks with the write position at 0; returns the next."""
        tf = self.file
        trigger = (0, 0)
        with contextlib.suppress(Exception):
            trigger = (tf.words[tf.end - 2], tf.words[tf.end - 1])  # the record that filled it
        if tf.ring:
            tf.wrapped()
        else:
            tf.flush_chunk()
        if self.calls and tf.failed is None:
            self.whole_stacks(trigger)
        return int(self._hooks["position"]())

    def whole_stacks(self, trigger: tuple[int, int] = (0, 0)) -> None:
        """Every traced thread's open calls, outermost first, between a LAP and a LAP_END mark
        (format.py). ``trigger``: (word, thread) of the record just written; when it is a return,
        that frame, still on its thread's stack, is left out. Never raises; a lap's stacks take at
        most 1/STACK_SHARE of the ring, and a thread that does not fit ends them without LAP_END."""
        try:
            emit = self._hooks["emit"]
            budget = self.file.end // fmt.RECORD_WORDS // fmt.STACK_SHARE - 2
            if budget < 1:
                return
            frames = sys._current_frames()
            self._untraced &= set(frames)
            emit(fmt.MARK | (fmt.MARK_LAP << 8))
            returning = trigger[0] & 0xFF in (fmt.RETURN, fmt.UNWIND)
            for tid, frame in frames.items():
                if tid in self._untraced:
                    continue
                keys = self._open_keys(frame)
                if returning and tid == trigger[1] and keys and keys[0] >> 32 == trigger[0] >> 32:
                    keys = keys[1:]
                cut = len(keys) > fmt.STACK_DEPTH
                keys = keys[: fmt.STACK_DEPTH]
                budget -= len(keys) + 1
                if budget < 0:
                    return
                for key in reversed(keys):
                    emit(key | fmt.STACK_FRAME, tid)
                emit(self._thread_key(tid) | ((1 if cut else 0) << 8) | fmt.STACK_END, tid)
            emit(fmt.MARK | (fmt.MARK_LAP_END << 8))
        except Exception:  # never into the traced program: the reader marks the stack partial
            pass

    def _thread_key(self, tid: int) -> int:
        """The thread's name as a names entry (``<thread>`` for its file), in the upper word: the
        reader names the thread tracks with it. Read without threading's lock (a hook may hold it)."""
        thread = getattr(threading, "_active", {}).get(tid)
        name = getattr(thread, "name", None)
        if not isinstance(name, str):
            return 0
        key = self._thread_names.get((tid, name))
        if key is None:
            code_id = self._next_id
            self._next_id += 1
            self.file.add_name(code_id, fmt.THREAD_FILE, 0, name[:200].replace("\t", " ").replace("\n", " "))
            key = self._thread_names[tid, name] = code_id << 32
        return key

    def _open_keys(self, frame: Any) -> list[int]:
        """The keys of the traced frames from ``frame`` outwards (innermost first)."""
        keys = []
        get = self._ids.get
        while frame is not None:
            code = frame.f_code
            key = get(id(code))
            if key is None:
                key = self.intern(code)
            if key >= 0:
                keys.append(key)
            frame = frame.f_back
        return keys

    def progress(self, step: Any) -> None:
        """A ``rankscope.progress(step=...)`` call: the step into the ring (never raises)."""
        with contextlib.suppress(Exception):
            if self.running and 0 <= step < 1 << 56:
                self._hooks["emit"]((int(step) << 8) | fmt.PROGRESS)

    # -- sampling ---------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        interval = (self.sample_ms or 10.0) / 1000.0
        emit = self._hooks["emit"]
        previous: dict[int, tuple[list[int], int]] = {}
        me = get_ident()
        while not self._stop_sampler.wait(interval):
            with contextlib.suppress(Exception):  # never into the traced program; the next tick tries again
                self._sample_once(emit, previous, me)

    def _sample_once(
        self, emit: Callable[..., None], previous: dict[int, tuple[list[int], int]], me: int
    ) -> None:
        now = perf_counter_ns()
        frames = sys._current_frames()
        for tid, frame in frames.items():
            if tid == me:
                continue
            words: list[int] = []
            f: Any = frame
            while f is not None and len(words) < SAMPLE_DEPTH:
                words.append(self.sample_key(f.f_code) | ((f.f_lineno or 0) & 0xFFFFFF) << 8)
                f = f.f_back
            last = previous.get(tid)
            if last is not None and last[0] == words and now - last[1] < SAMPLE_REFRESH_NS:
                emit(fmt.SAMPLE_SAME, tid)
                continue
            previous[tid] = (words, now)
            for word in reversed(words[1:]):
                emit(word | fmt.SAMPLE_FRAME, tid)
            emit(words[0] | fmt.SAMPLE_LEAF, tid)
        for tid in list(previous):
            if tid not in frames:
                del previous[tid]


def _progress_hook(note: Optional[Callable[[Any], None]]) -> None:
    """``rankscope.progress`` steps go into the ring while tracing (``note``), or nowhere (None)."""
    with contextlib.suppress(Exception):
        from rankscope.inproc import progress

        progress.trace_step = note

"""Backtraces of core files, pure: gdb's and pystack's text in, threads, a summary and groups out.

No I/O here: rankscope.core.collect runs the tools, rankscope.core.notes reads the core's notes.
The wording of each known crash pattern lives next to the pattern (:data:`PATTERNS`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from rankscope.core.notes import CoreNotes
from rankscope.folding import describe_members
from rankscope.model import Frame, Member
from rankscope.serial import OMIT_NONE, SKIP

#: Markers between gdb's commands: its own output has no reliable boundaries.
CURRENT_MARK = "@@rankscope: current thread"
ALL_MARK = "@@rankscope: all threads"

_GDB_THREAD = re.compile(r"^Thread (\d+) \(.*?LWP (\d+)\)")
_GDB_FRAME = re.compile(
    r"^#(\d+)\s+(?:0x([0-9a-fA-F]+) in )?(.+?)(?: \(.*\))?(?: at (\S+):(\d+))?(?: from (\S+))?$"
)
_GDB_CURRENT = re.compile(r"^\[Current thread is \d+ \(.*?LWP (\d+)\)\]")
_PYSTACK_THREAD = re.compile(r"^Traceback for thread (\d+)")
_PYSTACK_FRAME = re.compile(
    r'^\s*\((Python|C)\) File "(.*)", line (\d+), in (\S+)(?: \(inlined\))?(?: \((.+)\))?$'
)
#: Frames of these libraries are never "the library involved": they are where everything ends up.
_PLUMBING = ("libc.so", "libpthread", "ld-linux", "libffi", "libgcc_s", "libstdc++")
_PYTHON = ("libpython", "python")
#: How many of the crashing thread's innermost frames make a crash's signature (for grouping).
SIGNATURE_DEPTH = 6


#: The one line `core bt` prints when pystack is missing: what it costs and what to install.
NO_PYSTACK = (
    "no Python frames: pystack is not installed; to read them: pip install pystack "
    "(or pip install 'rankscope[pystack]')"
)


@dataclass
class NativeThread:
    """One thread as gdb printed it, innermost frame first."""

    lwp: int
    frames: list[Frame]


@dataclass
class CoreBacktrace:
    """Everything `core bt` learnt from one core file."""

    notes: CoreNotes
    #: The executable given to gdb (the one the core records unless --python said otherwise).
    executable: str
    #: A warning about the executable (a different python than the core's, a missing file).
    executable_warning: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The crashing thread's native frames, innermost first.
    native: list[Frame] = field(default_factory=list)
    #: The crashing thread's Python frames, innermost first (pystack).
    python: list[Frame] = field(default_factory=list)
    #: Shared objects on the crashing thread's stack, innermost first (libc and friends excluded).
    libraries: list[str] = field(default_factory=list)
    #: What the pattern means, when it is one rankscope knows.
    explanation: Optional[str] = field(default=None, metadata=OMIT_NONE)
    thread_count: int = 0
    #: Why part of the picture is missing (gdb or pystack failed, timed out, not installed).
    problems: list[str] = field(default_factory=list)
    #: gdb's and pystack's full output (written by --out, not in --json).
    gdb_text: str = field(default="", metadata=SKIP)
    pystack_text: str = field(default="", metadata=SKIP)

    @property
    def signature(self) -> tuple[str, ...]:
        functions = [f.function for f in self.native if f.function != "??"][:SIGNATURE_DEPTH]
        return (self.notes.signal_name, *functions)


@dataclass
class BadCore:
    """A file given to `core bt` that is not a readable core."""

    path: str
    reason: str


@dataclass
class CrashGroup:
    """Cores with the same signal and the same innermost frames: one crash, seen on these members."""

    members: list[Member]
    paths: list[str]
    example: CoreBacktrace

    @property
    def who(self) -> str:
        return describe_members(self.members)


@dataclass
class BtReport:
    SCHEMA: ClassVar[str] = "rankscope.core.bt/1"

    groups: list[CrashGroup]
    bad: list[BadCore] = field(default_factory=list)
    #: Every core read, in the order given (their full text goes to --out).
    cores: list[CoreBacktrace] = field(default_factory=list, metadata=SKIP)


# --- parsing -------------------------------------------------------------------------------


def _gdb_frame(line: str) -> Optional[Frame]:
    match = _GDB_FRAME.match(line.strip())
    if match is None:
        return None
    _n, _address, function, source, line_no, library = match.groups()
    return Frame(function.strip(), source or library or "", int(line_no or 0), library or "")


def parse_gdb(text: str) -> tuple[Optional[int], list[NativeThread]]:
    """gdb's batch output -> (the LWP of the thread that got the signal, every thread's frames)."""
    current: Optional[int] = None
    threads: list[NativeThread] = []
    section = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(CURRENT_MARK):
            section = "current"
            continue
        if line.startswith(ALL_MARK):
            section = "all"
            continue
        match = _GDB_CURRENT.match(line)
        if match:
            current = int(match.group(1))
            continue
        if section != "all":
            continue
        match = _GDB_THREAD.match(line)
        if match:
            threads.append(NativeThread(int(match.group(2)), []))
            continue
        if line.startswith("#") and threads:
            frame = _gdb_frame(line)
            if frame is not None:
                threads[-1].frames.append(frame)
    return current, threads


def parse_pystack(text: str) -> dict[int, list[Frame]]:
    """pystack's ``--native`` text -> thread id -> frames, innermost first (``library`` set on C frames)."""
    threads: dict[int, list[Frame]] = {}
    frames: Optional[list[Frame]] = None
    for line in text.splitlines():
        match = _PYSTACK_THREAD.match(line)
        if match:
            frames = threads.setdefault(int(match.group(1)), [])
            continue
        match = _PYSTACK_FRAME.match(line)
        if match and frames is not None:
            kind, filename, line_no, function, library = match.groups()
            frames.append(Frame(function, filename, int(line_no), (library or "") if kind == "C" else None))
    return {tid: list(reversed(stack)) for tid, stack in threads.items()}


def _libraries(native: Sequence[Frame], mixed: Sequence[Frame]) -> list[str]:
    seen: dict[str, None] = {}
    for frame in [*mixed, *native]:
        library = (frame.library or "").rsplit("/", 1)[-1]
        if library and not library.startswith(_PLUMBING):
            seen.setdefault(library)
    return list(seen)


# --- what a crash means ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A known crash: the signals it comes with, a regular expression over the crashing thread's
    function names (innermost first, one per line), and what it means. The first that matches
    wins: the specific ones (the NCCL watchdog, an allocator) come before the general ones."""

    name: str
    signals: tuple[str, ...]
    functions: str
    meaning: str


PATTERNS = (
    Pattern(
        "nccl-watchdog",
        ("SIGABRT",),
        r"handleNCCLGuard|ProcessGroupNCCL::(?:Watchdog|ncclCommWatchdog|workCleanupLoop)|ncclCommWatchdog",
        "an asynchronous NCCL error surfaced by ProcessGroupNCCL's watchdog thread: a collective failed or "
        "timed out earlier (another rank died, a network error, a mismatched collective); the watchdog "
        "rethrew it and aborted the process. The cause is in the NCCL log lines before the abort "
        "(NCCL_DEBUG=INFO, TORCH_NCCL_TRACE_BUFFER_SIZE for the flight recorder) and on the other ranks",
    ),
    Pattern(
        "heap-corruption",
        ("SIGABRT",),
        r"malloc_printerr|__libc_message|__fortify_fail|_int_free",
        "glibc found its heap damaged (a double free, a write past the end of a buffer) and aborted; the "
        "frame that aborted is only where it was noticed: run under valgrind or MALLOC_CHECK_=3 to catch it earlier",
    ),
    Pattern(
        "out-of-memory",
        ("SIGABRT",),
        r"OutOfMemoryError|bad_alloc|CUDACachingAllocator",
        "an allocation failed (host or device out of memory) and the exception ended the process",
    ),
    Pattern(
        "cuda-error",
        ("SIGABRT",),
        r"c10_cuda_check_implementation|cudaGetLastError|CUDAException|c10::cuda::.*Error",
        "a CUDA error aborted the process; CUDA reports errors asynchronously, so the frame that raised it may "
        "be later than the kernel that failed: rerun with CUDA_LAUNCH_BLOCKING=1 to raise it at the launch",
    ),
    Pattern(
        "terminate",
        ("SIGABRT",),
        r"std::terminate|__cxa_rethrow|__cxa_throw|__gxx_personality|terminate_handler|__terminate",
        "std::terminate: a C++ exception was thrown (or rethrown) where nothing caught it, often on a "
        "background thread or in a destructor; the frames below std::terminate show who threw it",
    ),
)

_SEGFAULTS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")


def explain(
    signal_name: str, native: Sequence[Frame], libraries: Sequence[str], gcore: bool
) -> Optional[str]:
    """What a crash with this signal and these frames means, when it is a known pattern."""
    if gcore:
        return (
            "a core of a live process (gcore stops it, takes the core, lets it go on): not a crash; "
            "the threads show where the process was at that moment"
        )
    functions = "\n".join(frame.function for frame in native)
    for pattern in PATTERNS:
        if signal_name in pattern.signals and re.search(pattern.functions, functions):
            return pattern.meaning
    if signal_name in _SEGFAULTS:
        extension = next((lib for lib in libraries if not lib.startswith(_PYTHON)), None)
        if extension:
            return (
                f"{signal_name} in native code called from {extension}: a bug in that extension or in what it "
                "was given (a freed or null pointer, a tensor on the wrong device, mismatched library versions)"
            )
        return f"{signal_name} in native code: a bad memory access in the interpreter or a library it loaded"
    if signal_name == "SIGABRT":
        return (
            "the process called abort(): the frames above abort say who gave up, and why is often in its log"
        )
    return None


# --- one core, many cores --------------------------------------------------------------------


def analyse(
    notes: CoreNotes,
    executable: str,
    gdb_text: str,
    pystack_text: str,
    problems: Sequence[str] = (),
    executable_warning: Optional[str] = None,
) -> CoreBacktrace:
    current, threads = parse_gdb(gdb_text)
    crashing = notes.crashing_thread or current
    native: list[Frame] = []
    for thread in threads:
        if thread.lwp == crashing:
            native = thread.frames
    if not native and threads:
        native = threads[0].frames
    mixed = parse_pystack(pystack_text).get(crashing or -1, [])
    python = [frame for frame in mixed if not frame.is_native]
    libraries = _libraries(native, mixed)
    result = CoreBacktrace(
        notes=notes,
        executable=executable,
        executable_warning=executable_warning,
        native=native,
        python=python,
        libraries=libraries,
        thread_count=len(threads) or len(notes.threads),
        problems=list(problems),
        gdb_text=gdb_text,
        pystack_text=pystack_text,
    )
    if not threads:
        result.problems.append("gdb printed no threads (see its output with --out)")
    result.explanation = explain(notes.signal_name, native, libraries, notes.written_by_gcore)
    return result


def member_of(core: CoreBacktrace, host: str) -> Member:
    from rankscope.ranks import rank_from_env

    env = core.notes.env
    rank = rank_from_env(env, host=env.get("SLURMD_NODENAME") or host)
    return Member(rank.host, core.notes.pid or 0, rank.rank)


def group(cores: Sequence[CoreBacktrace], host: str) -> list[CrashGroup]:
    """Cores with the same signature together, the largest group first."""
    groups: dict[tuple[str, ...], CrashGroup] = {}
    for core in cores:
        found = groups.get(core.signature)
        if found is None:
            groups[core.signature] = CrashGroup([member_of(core, host)], [core.notes.path], core)
        else:
            found.members.append(member_of(core, host))
            found.paths.append(core.notes.path)
    return sorted(groups.values(), key=lambda g: -len(g.members))

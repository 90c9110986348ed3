"""Start the first py-spy dumps of a `rankscope stacks` run before the rest of rankscope loads.

A local `rankscope stacks` run is mostly waiting for py-spy, yet it first spends ~50 ms of one
core importing click, dataclasses, subprocess and its own modules, while the other cores idle.
The console-script entry calls `start()` before any of that when the command line is a plain
local `stacks` run (rankscope.cli.plain): it guesses the workers from /proc (cheaply, see
`guess_pids`) and spawns their first dumps right away (as many as the collector runs at once),
with exactly the command line the collector would use (rankscope.stacks.runner runs them).

The collector (rankscope.stacks.collect) takes the runner over with `handover()` and adopts
each prefetched dump whose command line is one it was about to run; anything else runs as
usual. A wrong guess therefore never changes a result: it costs one read-only dump that
nobody adopts, which the collector (or `release()` at exit) lets finish, leaving its target
running. RANKSCOPE_PREFETCH=0 turns this off (see rankscope.cli.entry).

Only os and sys are imported here, plus rankscope modules that import nothing heavier
(ranks, pstate, pyspy_cmd, runner): importing more would defeat the purpose.
"""

from __future__ import annotations

import os
import sys

from rankscope.ranks import RANK_VARIABLES
from rankscope.stacks.pstate import ensure_running, parent_pid, proc_state
from rankscope.stacks.pyspy_cmd import default_parallelism, dump_argv, find_pyspy, pyspy_env
from rankscope.stacks.runner import Run, Runner

TYPE_CHECKING = False  # typing itself is too slow to import here
if TYPE_CHECKING:
    from collections.abc import Sequence

_RANK_MARKS = tuple(b"\0" + name.encode() + b"=" for name in RANK_VARIABLES)
_runner: Runner | None = None
_early: dict[tuple[str, ...], Run] = {}


def _ppid_table() -> dict[int, int]:
    table = {}
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        ppid = parent_pid(pid)
        if ppid is not None:
            table[pid] = ppid
    return table


def _is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def _has_rank(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = b"\0" + handle.read()
    except OSError:
        return False
    return any(mark in environ for mark in _RANK_MARKS)


def guess_pids(pids: Sequence[int]) -> list[int]:
    """The processes `stacks` will most likely dump: a cheap guess, never a promise.

    ``--pid P``: P's Python children (a launcher's workers), else P itself. No target: the
    Python processes with a rank variable whose parent is not one, when they share one parent.
    """
    parents = _ppid_table()
    if pids:
        guessed = []
        for pid in pids:
            children = sorted(c for c, p in parents.items() if p == pid and _is_python(c))
            guessed += children or ([pid] if _is_python(pid) else [])
        return guessed
    mine: set[int] = set()
    pid = os.getpid()
    while pid and pid not in mine:
        mine.add(pid)
        pid = parents.get(pid, 0)
    ranked = {p for p in parents if p not in mine and _is_python(p) and _has_rank(p)}
    workers = sorted(p for p in ranked if parents[p] not in ranked)
    return workers if len({parents[p] for p in workers}) == 1 else []


def start(pids: Sequence[int], native: bool, with_locals: bool, timeout: float) -> int:
    """Spawn the first dumps of a local `stacks` run for ``pids`` (none: find the job). How many."""
    global _runner
    if not sys.platform.startswith("linux"):
        return 0
    try:
        pyspy = find_pyspy()
        runner = Runner(pyspy_env())
        for pid in guess_pids(pids)[: default_parallelism()]:
            key = tuple(dump_argv(pyspy, pid, native=native, with_locals=with_locals))
            state = proc_state(pid)[0]
            if state and state not in ("Z", "X") and key not in _early:
                run = runner.spawn(key, timeout)
                run.target, run.state_before = pid, state
                _early[key] = run
                _runner = runner
    except Exception:  # py-spy missing, no posix_spawn ...: the collector does it all and reports why
        pass
    if _runner is not None:
        import atexit

        atexit.register(release)
    return len(_early)


def handover() -> tuple[Runner | None, dict[tuple[str, ...], Run]]:
    """The runner and the prefetched dumps by command line, now owned by the caller (once)."""
    global _runner, _early
    handed = _runner, _early
    _runner, _early = None, {}
    return handed


def settle(runner: Runner | None, unused: dict[tuple[str, ...], Run]) -> None:
    """Let every command of ``runner`` end and leave the targets of ``unused`` prefetched dumps running."""
    if runner is not None:
        runner.finish_all()
    for run in unused.values():
        ensure_running(run.target, run.state_before)


def release() -> None:
    """At exit, when no collector took them: let the prefetched dumps end, leaving targets running."""
    settle(*handover())

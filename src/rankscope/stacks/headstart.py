"""A plain `rankscope stacks` starts its first dumps before the rest of rankscope is imported.

Why: on the 2-core machine a 16-rank `stacks --pid L` spent 55-70 ms of CPU importing before its
first py-spy started, about 45 ms of it the job model's dataclasses and the standard library they
need (``dataclasses`` with ``inspect``, ``typing``; docs/benchmarks.md, "Start-up: the floor"), while
the manual ``pgrep | xargs py-spy dump`` starts its first dump at once. Here the dumps start first
and those imports run while py-spy holds the ranks.

What: for a command line that changes nothing about a dump (``stacks`` with only ``--pid P``,
``--json``, ``--color``, ``--no-color``; :func:`plain_pids`), the console entry
(rankscope.cli.node) calls :func:`begin`: the ranks are found with rankscope.proctable alone (the
rule rankscope.procs uses: a launcher's rank-carrying descendants, loader workers left out; a named
worker itself) and the first ``default_parallelism()`` of them are dumped with
rankscope.stacks.runner, the same command line and environment a dump gets later. The full pipeline
then runs as always (rankscope.stacks.local): it reads the same snapshot of /proc (:func:`claim`),
builds the jobs, and rankscope.stacks.collect takes over the dumps of its targets
(:meth:`HeadStart.hand_over`); a dump of a process that is no target after all (a guess the full
rules refine) is killed, its process left running.

A guess only ever saves time: anything unexpected here and there is no head start (the full path
dumps everything itself). Only ``os`` and the modules the dumps need anyway are imported.
"""

from __future__ import annotations

import os

from rankscope import procfs

TYPE_CHECKING = False  # typing is what this module exists to put off
if TYPE_CHECKING:
    from typing import Optional

    from rankscope.proctable import ProcessTable
    from rankscope.stacks.runner import Run, Runner

#: Words of a `stacks` command line that change nothing about what is dumped, or how.
PLAIN_WORDS = frozenset(("--json", "--color", "--no-color"))
#: States of a process py-spy cannot dump (rankscope.stacks.collect.precheck says why, later).
_ENDED = ("Z", "X")


class HeadStart:
    """The dumps started before the job model existed, and the /proc snapshot they were chosen from."""

    __slots__ = ("pyspy", "runner", "runs", "table")

    def __init__(self, pyspy: str, runner: Runner, table: ProcessTable) -> None:
        self.pyspy = pyspy
        self.runner = runner
        self.table = table
        #: pid -> its dump under way (or ended, not yet read).
        self.runs: dict[int, Run] = {}

    def fits(self, pyspy: str, native: bool, with_locals: bool) -> bool:
        """Whether these dumps are the ones a collection with these settings would start."""
        return pyspy == self.pyspy and not native and not with_locals

    def hand_over(self, pids: list[int]) -> dict[int, Run]:
        """The dumps of ``pids`` (for the caller to finish); every other one is cancelled."""
        taken = {pid: self.runs.pop(pid) for pid in pids if pid in self.runs}
        self.cancel()
        return taken

    def cancel(self) -> None:
        """Kill the dumps not handed over; each process they looked at is left running."""
        from rankscope.stacks.pstate import ensure_running

        for pid, run in list(self.runs.items()):
            self.runner.kill(run)
            ensure_running(pid, run.state_before)
            del self.runs[pid]


_started: Optional[HeadStart] = None


def plain_pids(words: list[str]) -> Optional[list[int]]:
    """The pids a `stacks` command line names (``[]``: none) when it has only :data:`PLAIN_WORDS`
    and ``--pid P`` (each a separate word, P in decimal); None for any other command line."""
    if words[:1] != ["stacks"]:
        return None
    pids: list[int] = []
    rest = iter(words[1:])
    for word in rest:
        if word in PLAIN_WORDS:
            continue
        value = next(rest, None) if word == "--pid" else None
        if value is None or not (value.isascii() and value.isdigit()):
            return None
        pids.append(int(value))
    return pids


def guess(table: ProcessTable, pids: list[int]) -> list[int]:
    """The ranks rankscope.procs would most likely dump: each named launcher's workers (a named
    worker itself), or, with no pid, every worker under a launcher. A subset of its targets in every
    case this module was written for; a process outside them is only dumped for nothing."""
    if not pids:
        return [
            pid
            for pid in sorted(table.procs)
            if table.is_candidate_worker(pid)
            and not table._parent_is_worker(pid)
            and table.nearest_launcher(pid) is not None
        ]
    from rankscope.proctable import launcher_kind

    found: list[int] = []
    for pid in pids:
        info = table.procs.get(pid)
        if info is None:
            continue
        if launcher_kind(info) is not None:
            found += [p for p in table.launched(pid) if p not in found]
        elif table.is_candidate_worker(pid) and pid not in found:
            found.append(pid)
    return found


def begin(words: list[str]) -> None:
    """Start the first dumps of a plain `stacks` command line (see the module's docstring)."""
    global _started
    pids = plain_pids(words)
    if pids is None or os.environ.get("RANKSCOPE_NO_HEADSTART"):
        return
    try:
        from rankscope.lifetime import tool_path

        pyspy = tool_path("py-spy")
        if not pyspy:
            return  # the full path says py-spy is missing
        from rankscope.proctable import ProcessTable
        from rankscope.stacks.pyspy_cmd import DEFAULT_TIMEOUT, default_parallelism, dump_argv, pyspy_env
        from rankscope.stacks.runner import Runner

        table = ProcessTable()
        chosen = guess(table, pids)[: default_parallelism()]
        if not chosen:
            return
        head = _started = HeadStart(pyspy, Runner(pyspy_env()), table)
        for pid in chosen:
            entry = procfs.process(pid)
            if entry is None or entry.state in _ENDED or entry.is_python is False:
                continue  # the full path's precheck reports it
            head.runs[pid] = head.runner.spawn(dump_argv(pyspy, pid), DEFAULT_TIMEOUT, pid, entry.state)
    except Exception:  # noqa: BLE001 - a head start is only ever a saving: the full path does it all
        return


def claim() -> Optional[HeadStart]:
    """The head start of this command, once (None: there is none)."""
    global _started
    head, _started = _started, None
    return head

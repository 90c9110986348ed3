"""Pure: snapshots of the job in, reasons to capture out. No I/O, no clock of its own.

- **Stall**: no rank's progress marker advanced for ``stall`` seconds; for a job that records no
  markers, its output files unchanged (size and modification time) for as long; for a job with
  neither, its ranks' flight recorders showing no new collective for as long; none while every
  rank is ending (its marker removed by its normal exit, torch's teardown still running). The
  clock starts at the first look that finds workers and restarts whenever anything advances, when
  a rank begins its normal exit, when new workers appear (an elastic restart), and when the caller
  says a suspected stall was not one
  (:meth:`Decider.not_stalled`: the ranks' stacks moved). One stall is reported once: the next
  needs an advance first.
- **Straggler**: a rank whose step is ``straggler_steps`` or more behind the most advanced rank;
  reported once until it catches up.
- **Death**: a worker that exited with an error (or by a signal, or died leaving its progress
  marker behind) while other workers of the last look live, or while they failed too since the
  last look (its launcher stopped them before the watcher looked); the new workers of an elastic
  restart are not "others": the old generation's last rank going is the end of its teardown. Found
  together, ranks that were all stopped (SIGTERM, or the in-process handler's ``.term`` dump) or
  that follow a death of their generation are its teardown; so is, after a death of its generation,
  a rank that ends while others still run stopped, reaped before its code was read, or with an exit
  code of its own (the launcher ends the ranks one by one; a rank whose collective lost its peer
  fails by itself); one killed by another signal (SIGKILL, SIGSEGV) is still a death. A worker whose exit code reads 0 is a
  rank that finished. The ranks named are those that were not stopped, unless every one was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rankscope.folding import RankSet
from rankscope.watch.model import Exit, Reason, Snapshot, Trigger

MARKERS = "progress markers"
OUTPUTS = "output files"
RECORDERS = "flight recorders"


@dataclass
class Decider:
    stall: float
    straggler_steps: int
    #: When something last advanced (None until the first look that found workers).
    last_advance: Optional[float] = None
    calls: dict[int, int] = field(default_factory=dict)
    outputs: dict[str, tuple[int, float]] = field(default_factory=dict)
    recorders: dict[int, int] = field(default_factory=dict)
    #: The workers seen ending (their marker removed by their normal exit): one more is an advance.
    ending: set[int] = field(default_factory=set)
    stalled: bool = False
    behind: set[int] = field(default_factory=set)
    #: The workers of the last look: a death counts only while others of its own generation live.
    previous: set[int] = field(default_factory=set)
    #: A death was reported since workers last appeared: ranks found gone together later are its teardown.
    died: bool = False
    #: Ranks of this generation that exited 0 while others of it still ran, and when: a rank that
    #: returned early leaves the others' collectives without a peer (no launcher reports an exit 0).
    early: list[tuple[Exit, float]] = field(default_factory=list)

    def not_stalled(self, now: float) -> None:
        """A suspected stall was not one: the clock starts again."""
        self.last_advance, self.stalled = now, False

    def decide(self, snap: Snapshot) -> list[Trigger]:
        triggers = self._deaths(snap)
        self.previous = {r.pid for r in snap.ranks}
        if not snap.ranks or all(r.ending for r in snap.ranks):
            return triggers  # none, or every one is ending normally (its marker removed at exit)
        advanced = self._advanced(snap)
        if advanced or self.last_advance is None:
            self.last_advance, self.stalled = snap.now, False
        watched = self._watched(snap)
        if watched and not self.stalled and snap.now - self.last_advance >= self.stall:
            self.stalled = True
            quiet = snap.now - self.last_advance
            triggers.append(
                Trigger(
                    Reason.STALL,
                    f"no {watched[:-1]} advanced for {quiet:.0f} s{self.early_words(snap.now)}",
                    signal=watched,
                )
            )
        straggler = self._stragglers(snap)
        if straggler is not None:
            triggers.append(straggler)
        return triggers

    def _deaths(self, snap: Snapshot) -> list[Trigger]:
        failed = [e for e in snap.exits if e.failed]
        # exit code 0, or reaped by its launcher before it was read with no sign of a failure
        finished = [e for e in snap.exits if not e.failed]
        # The others: workers already there at the last look (an elastic restart's new workers are not).
        alive = sum(1 for r in snap.ranks if r.pid in self.previous)
        # The ranks stopped (SIGTERM) beside one that failed by itself were stopped because of it.
        culprits = [e for e in failed if not e.stopped] or failed
        if failed and not alive:
            # Every other rank of the last look is gone too. A launcher stops the rest within 0.1 s
            # of a failure, faster than a watcher on a loaded machine looks: a failure of its own
            # found with ranks that ended since is still the death, unless its generation had one
            # already (this is that one's teardown). One rank of the last look alone is the end.
            gone = sum(1 for e in failed if e.pid in self.previous)
            if gone < 2 or self.died or all(e.stopped for e in failed):
                failed = []
        if not all(r.pid in self.previous for r in snap.ranks):  # new workers: anew
            self.died, self.early = False, []
        if finished and (alive or any(e.failed for e in snap.exits)):  # the others still ran
            self.early += [(e, snap.now) for e in finished]
        if self.died and all(e.stopped or e.code is None or e.code > 0 for e in failed):
            # After a death of its generation, the ranks that end are its consequences: stopped by the
            # launcher one by one (torchrun SIGTERMs every rank: a 3-rank job's second rank ends while
            # the third still runs), or exiting with an error of their own from a collective that lost
            # its peer (gloo's "Connection closed by peer"): no new death, the first capture holds the
            # cause. A rank killed by another signal (SIGKILL, SIGSEGV) is still told.
            failed = []
        if not failed:
            return []
        self.died = True
        ranks = tuple(sorted(e.rank for e in culprits if e.rank is not None))
        words = "; ".join(e.describe() for e in culprits)
        if not alive:
            text = f"{words}; the other ranks of its attempt ended too before the watcher looked"
        else:
            text = f"{words} while " + (
                "another rank still ran" if alive == 1 else f"{alive} other ranks still ran"
            )
        return [Trigger(Reason.DEATH, text + self.early_words(snap.now), ranks)]

    def early_words(self, now: float) -> str:
        """``; rank 1 (pid N) exited with code 0 while the others still ran (2.0 s before)``: the
        ranks of this generation that returned early ("" when none)."""
        return "".join(
            f"; {e.describe() if e.code == 0 else e.describe()[: -len(' died')] + ' ended, no error seen'}"
            " while the others still ran "
            + (f"({now - at:.1f} s before)" if now > at else "(seen at the same look)")
            for e, at in self.early
        )

    def rebase_outputs(self, outputs: tuple[tuple[str, int, float], ...]) -> None:
        """The output files as they are now are no news (the watcher's own line went into one)."""
        self.outputs = {path: (size, mtime) for path, size, mtime in outputs}

    def _advanced(self, snap: Snapshot) -> bool:
        """Whether anything says the job moved: a marker advanced (the output files only count
        for a job that records no markers, the recorders for one with neither), workers came or went,
        or one more began its normal exit."""
        calls = {r.pid: r.calls for r in snap.ranks if r.calls}
        outputs = {path: (size, mtime) for path, size, mtime in snap.outputs}
        recorders = dict(snap.recorders)
        ending = {r.pid for r in snap.ranks if r.ending}
        changed = bool(snap.exits) or bool(ending - self.ending)
        changed = changed or any(self.calls.get(pid) != n for pid, n in calls.items())
        self.ending |= ending
        if not calls:
            changed = changed or outputs != self.outputs
            if not outputs:
                changed = changed or any(self.recorders.get(pid) != n for pid, n in recorders.items())
        self.calls, self.outputs = {**self.calls, **calls}, outputs
        self.recorders = {**self.recorders, **recorders}
        return changed

    def _watched(self, snap: Snapshot) -> str:
        """What says the job advances: its markers when any rank records one, else its output files,
        else its flight recorders."""
        if any(r.calls for r in snap.ranks):
            return MARKERS
        if snap.outputs:
            return OUTPUTS
        return RECORDERS if snap.recorders else ""

    def _stragglers(self, snap: Snapshot) -> Optional[Trigger]:
        steps = {r.rank: r.step for r in snap.ranks if r.rank is not None and r.step is not None}
        if len(steps) < 2 or self.straggler_steps <= 0:
            self.behind = set()
            return None
        top = max(steps.values())
        behind = {rank for rank, step in steps.items() if top - step >= self.straggler_steps}
        new = behind - self.behind
        self.behind = behind
        if not new:
            return None
        slowest = min(steps[rank] for rank in new)
        text = f"{RankSet.of(new).phrase()} at step {slowest}, {top - slowest} steps behind (step {top})"
        return Trigger(Reason.STRAGGLER, text, tuple(sorted(new)))

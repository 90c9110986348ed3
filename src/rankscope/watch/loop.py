"""The watching loop: look at the job every ``interval`` seconds, wake at once when a process of it
exits, and capture what :mod:`rankscope.watch.decide` says is worth it.

The job is never signalled (unless ``--then kill`` after a stall, straggler or death capture, or a
SIGINT/SIGTERM the watcher received while it runs the job itself, which it forwards to the job's
process group) and never stopped: until a stall is suspected, the watcher only reads /proc and small
files.

A capture runs beside the loop (:class:`RunningCapture`: the selector waits on its pidfd and its
deadline), one at a time: triggers that come meanwhile wait in :attr:`Watcher.pending`, one per
reason, and are taken when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from rankscope import lifetime, procfs
from rankscope.folding import RankSet
from rankscope.procs import ProcessTable, launcher_kind
from rankscope.watch import collect
from rankscope.watch.attempt import FIRST, Attempt
from rankscope.watch.capture import WHY, CaptureResult, RunningCapture, cause_of, copy_dumps, found_nothing
from rankscope.watch.confirm import confirm_stall
from rankscope.watch.decide import Decider
from rankscope.watch.elsewhere import Elsewhere
from rankscope.watch.index import append_index, new_capture_dir, write_private
from rankscope.watch.model import Exit, RankSample, Reason, Snapshot, Trigger, WatchOptions
from rankscope.watch.recorders import RecorderLooks, cadence
from rankscope.watch.render import capture_line, note

if TYPE_CHECKING:
    import subprocess


@dataclass
class JobHandle:
    """The job: the processes at its top, and the launcher process when the watcher started it."""

    roots: list[int]
    process: Optional[subprocess.Popen[bytes]] = None
    #: The SLURM job: its processes on this node are watched, and a capture covers every node.
    jobid: Optional[str] = None
    #: The SLURM job's StdOut/StdErr (asked once): every node's lines, where srun's tasks write
    #: through a pipe of slurmstepd.
    _slurm_files: Optional[list[str]] = None

    def output_files(self, pids: list[int]) -> list[str]:
        """The job's output files: where its processes' stdout and stderr go, and SLURM's."""
        if self.jobid is not None and self._slurm_files is None:
            from rankscope.why.output import slurm_outputs

            self._slurm_files = slurm_outputs(self.jobid, time.monotonic() + 5.0)[0]
        return list(dict.fromkeys([*collect.output_files(pids), *(self._slurm_files or [])]))

    def tops(self) -> list[int]:
        """Where the workers are looked for: the roots, and the SLURM job's processes on this node."""
        if self.jobid is None:
            return list(self.roots)
        from rankscope.cluster.slurm_local import slurm_job_pids
        from rankscope.errors import NothingFoundError

        try:
            return list(dict.fromkeys([*self.roots, *slurm_job_pids(self.jobid)]))
        except NothingFoundError:
            return list(self.roots)

    def ended(self) -> bool:
        if self.process is not None:
            return self.process.poll() is not None
        return not any(collect.alive(pid) for pid in self.roots)

    def exit_code(self) -> int:
        """The launcher's exit code as a shell reports it (128+N for a signal); 0 for an attached job."""
        if self.process is None:
            return 0
        code = self.process.wait()
        return 128 - code if code < 0 else code

    def terminate(self) -> None:
        """SIGTERM to the job (its launcher's process group when the watcher started it)."""
        for pid in self.roots:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if self.process is not None:
                    os.killpg(pid, signal.SIGTERM)
                else:
                    os.kill(pid, signal.SIGTERM)


def _running(pid: int) -> bool:
    """The process is there and not a zombie (one whose exit nobody has collected yet is gone too)."""
    entry = procfs.process(pid)
    return entry is not None and entry.state not in ("Z", "X")


def _readable(fd: int) -> bool:
    """Whether a pidfd says its process exited, without waiting."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def forwarding(job: JobHandle, forwarded: Callable[[int], None]) -> Iterator[None]:
    """While the watcher runs the job itself: SIGINT and SIGTERM go on to the job's process group
    (the job is in a session of its own: a terminal's Ctrl-C reaches only the watcher)."""
    if job.process is None:
        yield
        return
    pgid = job.process.pid

    def forward(signum: int, _frame: object) -> None:
        forwarded(signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def requests() -> Iterator[int]:
    """SIGUSR1 to the watcher asks for a capture now: a descriptor that becomes readable when it comes."""
    read, write = os.pipe()
    for fd in (read, write):
        os.set_blocking(fd, False)

    def asked(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.write(write, b"!")

    previous = signal.signal(signal.SIGUSR1, asked)
    try:
        yield read
    finally:
        signal.signal(signal.SIGUSR1, previous)
        os.close(read)
        os.close(write)


#: The captures after which ``--then kill`` ends the job (never a requested one: a look was asked for).
KILL_AFTER = (Reason.STALL, Reason.STRAGGLER, Reason.DEATH)


@dataclass
class Capturing:
    """The capture that runs, and what it is for."""

    capture: RunningCapture
    trigger: Trigger
    confirmed: Optional[str]
    #: A stall whose every rank ran on the CPU while its stacks stood still (a long native call, or
    #: a spinning wait): not a stall when the capture finds nothing wrong.
    busy: bool = False
    #: The ranks that ran on the CPU between the confirmation's samples.
    busy_ranks: frozenset[int] = frozenset()


@dataclass
class Waiting:
    """A trigger that came while a capture ran, with the attempt it came in."""

    trigger: Trigger
    attempt: Attempt


REQUESTED = Trigger(
    Reason.REQUEST, "SIGUSR1: a capture asked for (a scheduler's warning before the time limit)"
)


@dataclass
class Watcher:
    job: JobHandle
    out: Path
    verb: str
    options: WatchOptions
    say: Callable[[str], None]
    workers: dict[int, collect.Watched] = field(default_factory=dict)
    #: Every worker seen, for the dumps they leave.
    seen: dict[int, collect.Watched] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    captures: list[Path] = field(default_factory=list)
    #: The captures of deaths: where the teardown's dumps belong.
    death_captures: list[Path] = field(default_factory=list)
    #: A capture of a death named its culprit ranks.
    death_named: bool = False
    failed_exits: list[Exit] = field(default_factory=list)
    _told_max: bool = False
    _told_blind: bool = False
    #: Since when the workers run with neither markers nor output files to watch.
    _blind_since: Optional[float] = None
    #: The signal passed on to the job: the ranks that die now were told to (no death is captured).
    stopped_by: Optional[int] = None
    #: The capture that runs now (one at a time), and the triggers that came while it ran.
    running: Optional[Capturing] = None
    pending: list[Waiting] = field(default_factory=list)
    #: Where the current attempt starts (an elastic restart): the later captures read only what
    #: it left (``why --log-from``, ``--since``).
    attempt: Attempt = FIRST
    #: When every worker of the last generation had exited (time.time()): new ones are a restart.
    _generation_ended: Optional[float] = None
    #: Deaths of ranks elsewhere (another node), as the job's output reports them.
    elsewhere: Elsewhere = field(default_factory=Elsewhere)
    #: The ranks' flight recorders, read only while the job has neither markers nor output files.
    _recorders: Optional[RecorderLooks] = None
    decider: Optional[Decider] = None
    #: Workers of this generation whose exit code could not be read (reaped by their launcher
    #: first) with no sign of a failure, and each worker's parent (its launcher) when found.
    _unread: list[Exit] = field(default_factory=list)
    _parents: dict[int, int] = field(default_factory=dict)
    #: A restart by the same launcher after a generation whose failure nobody saw: its death.
    _restart_death: Optional[Trigger] = None

    def _stopping(self, signum: int) -> None:
        self.stopped_by = signum

    def run(self) -> int:
        decider = self.decider = Decider(self.options.stall, self.options.straggler_steps)
        with (
            selectors.DefaultSelector() as selector,
            forwarding(self.job, self._stopping),
            requests() as asked,
        ):
            self.selector = selector
            selector.register(asked, selectors.EVENT_READ, REQUESTED)
            root_fds = [fd for fd in (collect.open_pidfd(pid) for pid in self.job.roots) if fd >= 0]
            for fd in root_fds:
                selector.register(fd, selectors.EVENT_READ, None)
            next_look = next_scan = time.monotonic()
            try:
                while not self.job.ended():
                    exits: list[Exit] = []
                    for key, _ in selector.select(self._pause(next_look)):
                        if isinstance(key.data, collect.Watched):
                            exits.append(self._exited(key.data))
                        elif key.data is REQUESTED:
                            with contextlib.suppress(OSError):
                                os.read(asked, 64)
                            self._act(REQUESTED, decider)
                    if self.running is not None and self.running.capture.done(time.monotonic()):
                        self._collect(decider)
                    now = time.monotonic()
                    if now < next_look and not exits:
                        continue
                    # the exits of this look belong to the attempt that ran until now, even when the
                    # scan below finds a restart's workers
                    attempt = self.attempt
                    if exits or now >= next_scan or not self.workers:
                        exits += self._exited_since_select()
                        # new workers found: the next look scans again (a launcher starting its ranks
                        # one by one), else a rank started a moment later goes unwatched until a rescan
                        next_scan = now if self._scan() else now + self.options.rescan
                    snap = self._snapshot(now, exits)
                    triggers = decider.decide(snap)
                    restart_death, self._restart_death = self._restart_death, None
                    if restart_death is not None and not any(t.reason == Reason.DEATH for t in triggers):
                        triggers.append(restart_death)
                    for trigger in triggers:
                        self._act(trigger, decider, attempt if trigger.reason == Reason.DEATH else None)
                    reported = self.elsewhere.look(snap, self._local_ranks(), triggers)
                    for trigger in reported:
                        self._act(trigger, decider)
                    triggers += reported
                    if triggers:
                        decider.rebase_outputs(collect.output_states(self.outputs))
                    next_look = time.monotonic() + self.options.interval
                self._drain_captures()
            finally:
                if self.running is not None:  # the watcher is ending (an error): its capture with it
                    self._unwatch_capture()
                    self.running.capture.finish()
                    self.running = None
                for fd in root_fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                for worker in self.workers.values():
                    worker.close()
        code = self.job.exit_code()
        self._at_end(code)
        return code

    # --- looking ------------------------------------------------------------------------------

    def _exited(self, worker: collect.Watched) -> Exit:
        gone = collect.exit_of(worker)
        self.selector.unregister(worker.pidfd)
        worker.close()
        self.workers.pop(worker.pid, None)
        if gone.failed:
            self.failed_exits.append(gone)
        elif gone.code is None:
            self._unread.append(gone)
        if not self.workers:  # a generation ended: the next one's output starts when it is found
            self._generation_ended = time.time()
        return gone

    def _exited_since_select(self) -> list[Exit]:
        """Workers that exited after the selector last answered: seen now, before a scan could find
        an elastic restart's workers beside them (a watcher held up between the two on a loaded
        machine), they are not taken for a failure beside the new workers."""
        gone = [w for w in self.workers.values() if w.pidfd >= 0 and _readable(w.pidfd)]
        return [self._exited(worker) for worker in gone]

    def _scan(self) -> bool:
        """Find the workers again: new ones (an elastic restart, a late start) get a pidfd. Whether
        any new one was found."""
        new = False
        for worker in collect.find_workers(self.job.tops()):
            if worker.pid in self.workers or not collect.alive(worker.pid):
                continue
            new = True
            entry = procfs.process(worker.pid)
            if entry is not None:
                self._parents[worker.pid] = entry.ppid
            worker.pidfd = collect.open_pidfd(worker.pid)
            if worker.pidfd >= 0:
                self.selector.register(worker.pidfd, selectors.EVENT_READ, worker)
            self.workers[worker.pid] = worker
            self.seen[worker.pid] = worker
        for pid, worker in list(self.workers.items()):
            if worker.pidfd < 0 and not collect.alive(pid):  # no pidfd: noticed here instead
                self.workers.pop(pid)
        self.outputs = self.job.output_files([*self.job.roots, *self.workers])
        if (
            new and self._generation_ended is not None
        ):  # an elastic restart: what came before is the old attempt's
            self._restart_death = self._unseen_failure()
            sizes = {path: size for path, size, _ in collect.output_states(self.outputs)}
            self.attempt, self._generation_ended = Attempt(sizes, self._generation_ended), None
            self.elsewhere.restarted(sizes)
        elif new and self.attempt is FIRST and self.job.process is not None:
            # The first attempt of a job the watcher started: its output is what the files gained
            # since, and `why` is told so (--log-from), so that it never takes torchrun's report of
            # a failed rank, printed while it tears the job down, for a restart and skips what the
            # rank wrote before it. An attached watcher knows no attempt before its own start.
            sizes = {path: size for path, size, _ in collect.output_states(self.outputs)}
            self.attempt = Attempt(sizes)
        return new

    def _unseen_failure(self) -> Optional[Trigger]:
        """At a restart: the earlier generation failed (its launcher starts new workers after a
        failure) although no death was seen, because its workers were reaped before their exit codes
        were read and left no marker (a loaded machine; a job without progress markers). A death of
        it when the new workers have a parent of the old ones (the same torchrun agent: not a script
        that runs a second launcher after the first)."""
        unread, self._unread = self._unread, []
        if not unread or self.decider is None or self.decider.died or self.stopped_by is not None:
            return None
        old = {self._parents.get(e.pid) for e in unread} - {None}
        new = {self._parents.get(pid) for pid in self.workers}  # the old generation's have all exited
        if not old & new:
            return None
        ranks = RankSet.of(e.rank for e in unread if e.rank is not None).phrase() or "its workers"
        return Trigger(
            Reason.DEATH,
            f"the launcher started new workers after {ranks} ended, their exit codes reaped before "
            "the watcher read them (a launcher restarts a failed attempt)",
        )

    def _snapshot(self, now: float, exits: list[Exit]) -> Snapshot:
        ranks = tuple(worker.sample() for worker in self.workers.values())
        outputs = collect.output_states(self.outputs)
        recorders = self._read_recorders(now, ranks, outputs)
        answering = recorders or (self._recorders is not None and self._recorders.answering)
        blind = bool(ranks) and not outputs and not any(r.calls or r.ending for r in ranks) and not answering
        if not blind:
            self._blind_since = None
        elif self._blind_since is None:
            self._blind_since = now
        elif now - self._blind_since >= self.options.stall and not self._told_blind:
            self._told_blind = True
            self.say(
                note(
                    f"no progress markers (rankscope.progress), no output files and no flight recorders "
                    f"(RANKSCOPE_INPROC=1 and torch.distributed in the ranks) for {self.options.stall:g} s: "
                    "a stall is noticed once one appears; deaths are watched"
                )
            )
        return Snapshot(now, ranks, tuple(exits), outputs, recorders)

    def _read_recorders(
        self, now: float, ranks: tuple[RankSample, ...], outputs: tuple[tuple[str, int, float], ...]
    ) -> tuple[tuple[int, int], ...]:
        """The ranks' recorder numbers, for a job with neither markers nor output files (else none)."""
        if self._recorders is None:
            self._recorders = RecorderLooks(cadence(self.options.stall, self.options.interval))
        if not ranks or outputs or any(r.calls or r.ending for r in ranks):
            self._recorders.reset()
            return ()
        return self._recorders.look(now, self.workers.values())

    def _local_ranks(self) -> set[int]:
        return {worker.rank for worker in self.seen.values() if worker.rank is not None}

    # --- acting -------------------------------------------------------------------------------

    def _pause(self, next_look: float) -> float:
        """How long the selector may wait: until the next look, or the running capture's deadline."""
        until = next_look if self.running is None else min(next_look, self.running.capture.deadline)
        return max(0.0, until - time.monotonic())

    def _act(self, trigger: Trigger, decider: Decider, attempt: Optional[Attempt] = None) -> None:
        if trigger.reason == Reason.DEATH and self.stopped_by is not None:
            return  # the job is ending because its user said so
        attempt = self.attempt if attempt is None else attempt
        if self.running is not None:
            self._queue(Waiting(trigger, attempt))
            return
        if len(self.captures) >= self.options.max_captures:
            if not self._told_max:
                self._told_max = True
                self.say(
                    note(
                        f"{trigger.reason.value} ({trigger.text}): not captured, --max-captures "
                        f"{self.options.max_captures} reached"
                    )
                )
            return
        confirmed: Optional[str] = None
        busy, busy_ranks = False, frozenset[int]()
        if trigger.reason == Reason.STALL and self.options.confirm and self.workers:
            check = confirm_stall(sorted(self.workers), min(1.0, self.options.interval))
            if check.stalled is None and not any(collect.alive(pid) for pid in self.workers):
                return  # they could not be sampled because they are gone: the job is ending
            if check.stalled is False:
                decider.not_stalled(time.monotonic())
                self.say(
                    note(f"quiet ({trigger.text}) but the ranks' stacks move ({check.text}): watching on")
                )
                return
            confirmed, busy = check.text, check.busy
            ranks = (self.workers[pid].rank for pid in check.busy_pids if pid in self.workers)
            busy_ranks = frozenset(rank for rank in ranks if rank is not None)
        self._capture(trigger, confirmed, attempt, busy, busy_ranks)

    def _queue(self, new: Waiting) -> None:
        """A trigger while a capture runs waits for it to end; one of a reason already waiting is
        folded into that one (its ranks added, its text the latest)."""
        trigger = new.trigger
        for index, waiting in enumerate(self.pending):
            if waiting.trigger.reason == trigger.reason:
                ranks = tuple(sorted({*waiting.trigger.ranks, *trigger.ranks}))
                folded = Trigger(trigger.reason, trigger.text, ranks, trigger.signal)
                self.pending[index] = Waiting(folded, new.attempt)
                return
        self.pending.append(new)
        assert self.running is not None
        self.say(
            note(
                f"{trigger.reason.value} ({trigger.text}): queued behind the running capture "
                f"({self.running.trigger.reason.value})"
            )
        )

    def _collect(self, decider: Optional[Decider]) -> None:
        """The running capture ended (or passed its deadline): record it, then --then kill, then the
        next trigger that waited."""
        assert self.running is not None
        running, self.running = self.running, None
        self._unwatch_capture(running)
        result = running.capture.finish()
        # Every rank computing while its stack stood still, and `why` finding nothing wrong (no rank
        # in a collective, no GPU blocked): a step longer than --stall, not a stall; never killed.
        stall = running.trigger.reason == Reason.STALL
        cleared = stall and running.busy and found_nothing(result.document)
        # The ranks the capture finds elsewhere while the others wait all ran on the CPU: a long step
        # on them (rank 0 evaluating in one native call while the others wait in a barrier) as much
        # as a loop that never ends; --then kill does not end the job for it.
        working = (
            stall
            and not cleared
            and bool(result.ranks)
            and set(result.ranks) <= running.busy_ranks
            and cause_of(result.document) == "elsewhere"
        )
        self._record(running.trigger, result, running.confirmed, cleared, working)
        if (
            running.trigger.reason in KILL_AFTER
            and self.options.then == "kill"
            and not cleared
            and not working
            and not self.job.ended()
        ):
            self.say(note("--then kill: SIGTERM to the job"))
            self.stopped_by = signal.SIGTERM  # its ranks now end as told: no deaths to capture
            self.job.terminate()
            self.pending.clear()
        if decider is not None:
            decider.rebase_outputs(collect.output_states(self.outputs))
            while self.pending and self.running is None:
                waiting = self.pending.pop(0)
                self._act(waiting.trigger, decider, waiting.attempt)

    def _unwatch_capture(self, running: Optional[Capturing] = None) -> None:
        running = running or self.running
        if running is not None and running.capture.pidfd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(running.capture.pidfd)

    def _drain_captures(self) -> None:
        """The job ended: the running capture is waited for (within its deadline); the triggers
        that waited are only noted, there is no job left to capture."""
        if self.running is not None:
            lifetime.wait([self.running.capture.child])
            self._collect(None)
        for waiting in self.pending:
            trigger = waiting.trigger
            self.say(note(f"{trigger.reason.value} ({trigger.text}): not captured, the job ended first"))
        self.pending.clear()

    def _targets(self, attempt: Attempt) -> list[str]:
        """What the capture is pointed at: the SLURM job (every node), else the launchers at the top
        of the job, else its workers still alive; where none is left (the launcher ended within
        moments of a death, as a 2-rank torchrun job's does), the job's output files alone, read after
        it (a `why --pid` of gone processes finds nothing: seen on a real job); the files go with the
        pids too, for a process that ends between this look and the capture's start."""
        if self.job.jobid is not None:
            return ["--jobid", self.job.jobid]
        pids = []
        for pid in self.job.roots:
            entry = procfs.process(pid)
            if entry is not None and launcher_kind(entry) is not None:
                pids.append(pid)
        if not pids and any(w.rank is not None for w in self.workers.values()):
            # torch.multiprocessing.spawn's parent: its children's ranks are known through it only
            # (they carry no rank variable), so `why --pid` of a child alone names no rank
            parents = {self._parents.get(pid) for pid in self.workers}
            table = ProcessTable() if parents & set(self.job.roots) else None
            pids = [pid for pid in self.job.roots if table is not None and table.spawned_ranks(pid)]
        pids = pids or [pid for pid in sorted(self.workers) if _running(pid)]
        # the job's output files too: a process may be gone by the time `why` starts (it then reads
        # them, where a `--pid` alone of a gone process is an error); `why` reads each file once
        # (`--log-from FILE:BYTES` of the attempt only says where in such a file to start reading)
        logs = [word for path in self.outputs for word in ("--log", path)]
        if not pids and not any(_running(pid) for pid in self.job.roots) and logs:
            return logs
        pids = pids or sorted(self.workers) or list(self.job.roots)
        return [word for pid in pids for word in ("--pid", str(pid))] + logs

    def _capture(
        self,
        trigger: Trigger,
        confirmed: Optional[str],
        attempt: Attempt,
        busy: bool = False,
        busy_ranks: frozenset[int] = frozenset(),
    ) -> None:
        """Start the capture; the loop goes on watching and collects it when it ends."""
        directory = new_capture_dir(self.out, trigger.reason.value)
        self.captures.append(directory)
        if trigger.reason == Reason.DEATH:
            self.death_captures.append(directory)
        capture = RunningCapture.start(
            self.verb, self._targets(attempt), directory, self.options.capture_timeout, attempt
        )
        self.running = Capturing(capture, trigger, confirmed, busy, busy_ranks)
        if capture.pidfd >= 0:
            self.selector.register(capture.pidfd, selectors.EVENT_READ, self.running)

    def _record(
        self,
        trigger: Trigger,
        result: CaptureResult,
        confirmed: Optional[str],
        cleared: bool = False,
        working: bool = False,
    ) -> None:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "reason": trigger.reason.value,
            "trigger": trigger.text,
            "trigger_ranks": list(trigger.ranks),
            "dir": result.directory.name,
            "verb": result.verb,
            "verdict": result.verdict,
            "ranks": result.ranks,
            "returncode": result.returncode,
            "timed_out": result.timed_out,
        }
        if confirmed is not None:
            entry["confirmed"] = confirmed
        if cleared:
            entry["cleared"] = "every rank ran on the CPU and why found nothing wrong: not a stall"
        if working:
            entry["working"] = (
                "the ranks found elsewhere ran on the CPU: a long step, or a loop that never ends"
            )
        lead = self._early_lead(result)
        if lead:
            entry["lead"] = lead
        with contextlib.suppress(OSError):
            write_private(
                result.directory, "watch.json", json.dumps({**entry, "argv": result.argv}, indent=1).encode()
            )
            if result.document is not None:
                write_private(result.directory, "watch-document.json", json.dumps(result.document).encode())
            if result.errors:
                write_private(result.directory, "watch-stderr.txt", result.errors.encode())
        append_index(self.out, entry)
        if trigger.reason == Reason.DEATH and result.ranks:
            self.death_named = True
        if cleared:
            self.say(
                note(
                    f"quiet ({trigger.text}) but every rank ran on the CPU and why found nothing wrong: "
                    f"a long step, not a stall; watching on -> {result.directory}"
                )
            )
            return
        self.say(capture_line(trigger, result.verdict, result.ranks, str(result.directory)))
        if lead:
            self.say(note(f"lead: {lead}"))
        if working:
            who = RankSet.of(result.ranks).phrase()
            held = "; --then kill holds off" if self.options.then == "kill" else ""
            self.say(
                note(
                    f"{who} ran on the CPU throughout the samples: a long step there (an evaluation, "
                    f"a checkpoint) or a loop that never ends{held}; watching on"
                )
            )

    def _early_lead(self, result: CaptureResult) -> str:
        """Where the capture named no culprit: the ranks of this generation the watcher saw exit 0 while
        the others still ran (a capture reads the job's output and stacks, where an exit 0 leaves no
        trace: seen on a real 3-rank job whose rank 0 called sys.exit(0) before an all_reduce)."""
        early = [e for e, _at in self.decider.early if e.code == 0] if self.decider is not None else []
        if result.ranks or not early:
            return ""
        who = RankSet.of(e.rank for e in early if e.rank is not None).phrase() or "a worker"
        pids = ", ".join(str(e.pid) for e in early)
        return (
            f"{who} (pid {pids}) exited with code 0 while the others still ran: it likely returned from "
            "its main (or called sys.exit) before a collective the others were in"
        )

    def _at_end(self, code: int) -> None:
        """The job ended: the dumps its ranks left go into the last capture of a death (else the last
        capture); a job that failed without any capture gets one of its own, and so does one whose
        death captures named no culprit while its output names one now (torch.multiprocessing.spawn
        prints a child's traceback from the parent, after the death capture read the files)."""
        dumps = [path for worker in self.seen.values() for path in collect.handler_dumps(worker)]
        files = list(self.outputs)
        read = self.verb == WHY and bool(files) and code != 0
        homes = self.death_captures or self.captures
        home: Optional[Path] = homes[-1] if homes else None
        if home is not None:
            copied = copy_dumps(dumps, home)
            if copied:
                self.say(note(f"{len(copied)} in-process dump(s) of the ranks' ends added to {home}"))
            if not (read and self.death_captures and not self.death_named):
                return
            dumps = []  # kept with the death's capture
        second_look = home is not None
        if code == 0 and not self.failed_exits:
            return
        if not dumps and not self.failed_exits and not read:
            return  # nothing of the ranks to keep: the exit code says it all
        if self.stopped_by == signal.SIGINT or (self.stopped_by is not None and not dumps):
            return  # Ctrl-C: the user ended it; a SIGTERM (a scheduler's) keeps what the ranks dumped
        text = f"the job exited with code {code}" if self.job.process is not None else "the job ended"
        ranks = tuple(sorted(e.rank for e in self.failed_exits if e.rank is not None))
        text = "; ".join([text, *(e.describe() for e in self.failed_exits)])
        early = self.decider.early_words(time.monotonic()) if self.decider is not None else ""
        trigger = Trigger(Reason.END, text + early, ranks)
        directory = new_capture_dir(self.out, Reason.END.value)
        self.captures.append(directory)
        copied = copy_dumps(dumps, directory)
        verdict = f"{len(copied)} rank dump(s) of the teardown kept" if copied else "no rank left a dump"
        # After a rank that returned early, the ranks that failed may be its victims (a collective
        # that lost its peer): no culprit is named.
        culprits = [] if early else list(ranks)
        result = CaptureResult(directory, "", [], None, verdict=verdict, ranks=culprits)
        if read:
            # a failed job that no capture caught while it ran (it ended within moments, or its ranks'
            # exit codes could not be read: torch.multiprocessing.spawn's children): its output, read now
            words = [word for path in files for word in ("--log", path)]
            capture = RunningCapture.start(
                self.verb, words, directory, self.options.capture_timeout, self.attempt
            )
            lifetime.wait([capture.child])
            read_back = capture.finish()
            if second_look and not (read_back.document is not None and read_back.ranks):
                # the output names no culprit either: the death's capture says all there is
                shutil.rmtree(directory, ignore_errors=True)
                self.captures.remove(directory)
                return
            if read_back.document is not None and read_back.verdict:
                extra = f"; {verdict}" if copied else ""
                result = replace(read_back, verdict=read_back.verdict + extra)
        self._record(trigger, result, None)

"""Evidence that is one line (or a few): exception lines without their traceback, NCCL WARN lines,
torch's watchdog lines, launchers reporting a rank's death, native signal backtraces.

Each kind is found with one ``bytes.find`` loop per block for a word every such line holds, so a
block without any costs a few C-speed scans; only the lines found are split and parsed. The result
is a list of :class:`rankscope.evidence.Finding`, weighed with the tracebacks by
:func:`rankscope.evidence.decide`.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Optional

from rankscope.evidence import CULPRIT, VICTIM, Finding, Kind
from rankscope.folding import RankSet
from rankscope.logs.c10d_errors import NEEDLES as C10D_NEEDLES
from rankscope.logs.c10d_errors import WORDS as C10D_WORDS
from rankscope.logs.c10d_errors import C10dLines, Seen
from rankscope.logs.collective_trace import HEADER as STACK_HEADER
from rankscope.logs.collective_trace import CollectiveTraces
from rankscope.logs.cuda import ASYNC_STEP, HARDWARE_STEP
from rankscope.logs.deepspeed import EXIT as DEEPSPEED_EXIT
from rankscope.logs.deepspeed import NEEDLES as DEEPSPEED_NEEDLES
from rankscope.logs.deepspeed import DeepSpeedLaunchers
from rankscope.logs.fatal import NEEDLE as FATAL_NEEDLE
from rankscope.logs.fatal import SIGNAL_CAUSES, FatalDump, fatal_findings, parse_dumps
from rankscope.logs.finished import BARRIER_NEEDLE as FINISHED_BARRIER
from rankscope.logs.finished import NEEDLE as FINISHED_NEEDLE
from rankscope.logs.finished import finished_finding
from rankscope.logs.kernel_oom import OomKill, oom_kill
from rankscope.logs.kernel_xid import XID_CONSEQUENCE, XID_ECC, XID_PROGRAM, xid_line, xid_step, xid_words
from rankscope.logs.kubernetes import EVICTED_STEP, POD_OOM_STEP, pod_events
from rankscope.logs.labels import host_and_rank, label_text, process_of
from rankscope.logs.lone_failure import name_the_lone_failure
from rankscope.logs.nccl_lines import LINE, SIGNALS
from rankscope.logs.nccl_reason import NcclReason, nccl_reason
from rankscope.logs.prefixes import PAREN, PLAIN, SourceLabels, split_line, tee_local, torch_global_rank
from rankscope.logs.roles import VICTIM_MESSAGES, nccl_error_line
from rankscope.logs.scheduler import OOM_KILL, OOM_STEP, dedupe_key, scheduler_finding
from rankscope.logs.stopped import NEEDLE as STOPPED_NEEDLE
from rankscope.logs.stopped import signal_of, stopped_finding
from rankscope.logs.tracebacks import HEADER, MAX_TAIL, TAIL_REACH

#: An exception line: ``ValueError: x``, ``torch.OutOfMemoryError: y``, ``pkg.SomeException``.
EXCEPTION_LINE = re.compile(rb"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::\s|:?$)")
#: Exception lines kept per rank (the first ones: a rank's first error is the one that matters).
PER_RANK = 4
#: NCCL WARN lines kept that are no finding (:attr:`LineEvidence.nccl_warnings`).
KEPT_WARNINGS = 4
#: NCCL signals whose rank is the one whose own call failed (the rest are victims or set-up facts).
NCCL_CULPRITS = {
    "cuda_oom": "nccl:cuda_oom",
    "cuda_init_error": "nccl:cuda_init_error",
    "cuda_invalid_argument": "nccl:cuda_invalid_argument",
    "cuda_failure": "nccl:cuda_failure",
    "no_algorithm": "nccl:no_algorithm",
    "net_ofi_error": "nccl:net_ofi_error",
    "ib_verbs_failed": "nccl:ib_verbs_failed",
    "p2p_unsupported": "nccl:p2p_unsupported",
    "shm_segment": "nccl:shm_too_small",
}
NCCL_VICTIMS = {"remote_error": "nccl:remote_error"}
#: InfiniBand completion errors: the network under this rank failed (kind ``network``), except a
#: flushed work request (status 5), which follows another failure of the same connection.
IB_COMPLETION = "ib_completion"
_IB_FLUSHED = "5"
_SIGNALS = tuple(
    s for s in SIGNALS if s.name in NCCL_CULPRITS or s.name in NCCL_VICTIMS or s.name == IB_COMPLETION
)

#: What a watchdog timeout usually means, said after it: true of most multi-rank jobs, not of a job
#: whose recorder shows one rank alone (rankscope.why.findings says less then).
NEVER_JOINED = "they waited for a rank that never joined it"
#: The one rank of a job of known size that reported no timeout of the collective the others timed out in.
ABSENT = "that reported no timeout: likely the one that never joined"
#: The job's size as the log tells it: NCCL's ``comm 0x.. rank 1 nranks 4`` (INFO), Lightning's
#: ``All distributed processes registered. Starting with 4 processes``.
_NRANKS = re.compile(rb"\brank \d+ nranks (\d+)\b")
_STARTING = re.compile(rb"processes registered\. Starting with (\d+) processes")
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(([^)]*)\)")
_WORK = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut)=([^,)\s]+)")
#: torch's own rank in its NCCL lines: ``[Rank 5]``, ``[PG 2 Rank 1]``, ``[PG 0 (default_pg) Rank 1]`` (2.4),
#: ``[PG ID 0 PG GUID 0(default_pg) Rank 7]`` (2.5 and later).
_RANK_IN_TEXT = re.compile(r"\[(?:PG (?:ID )?(\d+) (?:PG GUID \S+ |\([^)\s]*\) )?)?Rank (\d+)\]")
_DUMP_FROM = re.compile(rb"collective timeout from rank (\d+)")
#: torch 2.3-2.5 after a timeout: ``[PG 2 Rank 1] Timeout at NCCL work: 30871, last enqueued ...``.
_TIMEOUT_AT = re.compile(r"Timeout at NCCL work: (\d+)")
#: A CUDA error the watchdog found when it polled this rank's work (the faulting kernel ran on this
#: rank's GPU): ``Process group watchdog thread terminated with exception: CUDA error: ...``.
_WATCHDOG_CUDA = re.compile(r"watchdog thread terminated with exception: (CUDA error: [^\n]*)")
#: torch's heartbeat monitor (ProcessGroupNCCL, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, 480 s by default).
_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds")
#: The head of torch's C++ log lines: ``E626 05:14:36.393067`` (month unpadded, day; no year).
_GLOG = re.compile(r"\b[IWEF](\d{3,4}) (\d\d:\d\d:\d\d(?:\.\d+)?)")


def _glog_time(text: str) -> Optional[str]:
    """``0626 05:14:36.393067`` from a torch C++ line: comparable within one log (one year)."""
    found = _GLOG.search(text, 0, 80)
    return f"{found.group(1).zfill(4)} {found.group(2)}" if found is not None else None


_TORCHRUN_FAILED = re.compile(rb"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_SRUN = re.compile(
    rb"srun: error: (\S+): tasks? ([\d,-]+): (Killed|Terminated|Segmentation fault|Aborted|Bus error|Out Of Memory"
    rb"|Exited with exit code (\d+))"
)
#: vLLM's executor: ``Worker proc VllmWorker-1 died unexpectedly, shutting down executor.``
_WORKER_DIED = re.compile(rb"Worker proc (\S+) died unexpectedly")
#: Ray's raylet (or driver) on a worker process that ended without its task's answer: ``A worker died or
#: was killed while executing a task by an unexpected system error. ... Worker IP address: A Worker port:
#: P Worker PID: N Worker exit type: SYSTEM_ERROR Worker exit detail: ...`` (the type and detail since 2.x).
_RAY_WORKER_DIED = re.compile(
    rb"A worker died or was killed while executing a task by an unexpected system error\.[^\n]{0,600}?"
    rb"Worker IP address: (\S+)[^\n]{0,80}? Worker PID: (\d+)"
    rb"(?: Worker exit type: (\w+))?(?: Worker exit detail: ([^\n]{0,400}))?"
)
RAY_WORKER_NEEDLE = b"A worker died or was killed"
#: Ray's memory monitor's word for a worker it killed (the node's memory, not the worker's own error).
_RAY_LOW_MEMORY = b"running low on memory"
RAY_MEMORY_STEP = (
    "Ray's memory monitor killed the worker because the node ran low on host memory: lower the memory "
    "each task or actor uses (batch size, object store pressure, data loader workers), set its memory= "
    "resource so fewer run per node, or give the node more memory (RAY_memory_usage_threshold)"
)
#: Open MPI's report of a rank's MPI_Abort (4.x and 5.x): ``MPI_ABORT was invoked on rank 1 in
#: communicator MPI_COMM_WORLD`` and, on the next line, ``with errorcode 3.``
_MPI_ABORT = re.compile(
    rb"MPI_ABORT was invoked on rank (\d+) in communicator (\S+)\s+with errorcode (-?\d+)"
)
#: srun ending a step: after a task failed (``_step_signal: Terminating StepId=J.S``), or when the step
#: or job was cancelled (slurmstepd's ``*** STEP J.S ON host CANCELLED AT ...``): the tasks it kills
#: after that are stopped by it.
_STEP_ENDING = re.compile(rb"_step_signal: Terminating StepId=|\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT")
_MPIRUN = re.compile(rb"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)")
#: Open MPI's first process that exited with an error code: ``Process name: [[JOB,1],RANK]`` (4.x;
#: 5.x's PRRTE: ``[prterun-HOST-PID@1,RANK]``) and ``Exit code: N`` on the next line.
_MPIRUN_EXIT = re.compile(
    rb"Process name:\s*\[(?:\[\d+,\d+\],|[^\[\]\s]*@\d+,)(\d+)\][ \t]*\r?\n[ \t]*Exit code:[ \t]*(-?\d+)"
)
_SIGNALS_DIED = re.compile(rb"died with <Signals\.(SIG\w+): (\d+)>")
#: MosaicML Composer's launcher (``composer train.py``), the first rank it saw fail: ``Rank 2 crashed with
#: exit code -7.`` (a global rank; a negative code a signal). It prints that rank's own output after it,
#: between ``----------Begin global rank 2 STDERR----------`` lines, without a prefix.
_COMPOSER = re.compile(rb"\bRank (\d+) crashed with exit code (-?\d+)\.")
#: torch.multiprocessing.spawn in the parent: ``process 1 terminated with signal SIGKILL`` (or an exit code).
_SPAWN_EXIT = re.compile(
    # torch < 1.8 raised a plain ``Exception`` with the same words
    rb"(?:ProcessExitedException|\bException): process (\d+) terminated with (?:signal (SIG[A-Z]+)|exit code (\d+))"
)
_OMPI_SIGNAL = re.compile(rb"^\s*\[([^\]:\s]+):0*(\d+)\] \*\*\* Process received signal \*\*\*", re.M)
_OMPI_FRAME = re.compile(r"\[\s*(\d+)\] (\S+)")
#: What the number a launcher names is: torchrun and DeepSpeed name the local rank, srun its task.
#: A shell reporting its child's death by a signal, alone on its line: bash and sh interactively
#: (``Killed``, ``Segmentation fault (core dumped)``), bash running a
#: script (``./run.sh: line 12: 48213 Killed     torchrun ...``), zsh (``zsh: killed     python train.py``);
#: the command, when named, comes after two spaces or more (a sentence that starts with the word does not);
#: after a progress bar (``... 4.47s/it]Killed``: tqdm ends its line with a carriage return, not a newline).
_SHELL_DEATH = re.compile(
    rb"(?m)^(?:\S+: line \d+: +\d+ +|zsh: |[^\n]*(?:it/s|s/it)\])?"
    rb"(Killed|killed|Segmentation fault|segmentation fault|Aborted|abort|Bus error|bus error"
    rb"|Floating point exception|Illegal instruction)(?: +\(core dumped\))?(?: {2,}\S.*)?\r?$"
)
#: The words of a shell's report that carry neither ``illed`` nor ``core dumped``: bash's
#: ``./run.sh: line 5: 10971 Segmentation fault      RANK=1 python train.py`` where no core was written.
_SHELL_WORDS = re.compile(
    rb"Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction"
).search
_SHELL_SIGNALS = {
    b"killed": 9,
    b"segmentation fault": 11,
    b"aborted": 6,
    b"abort": 6,
    b"bus error": 7,
    b"floating point exception": 8,
    b"illegal instruction": 4,
}
#: Which group of a launcher's death pattern holds the dead process's pid.
_PID_GROUP = {_TORCHRUN_FAILED: 3, _MPIRUN: 2}
_NOUNS = {
    "shell": "the command it ran",
    "deepspeed": "local rank",
    "torchrun": "local rank",
    "srun": "task",
    "mpirun": "rank",
    "mp.spawn": "process",
    "composer": "rank",
}
_SIGNAL_NAMES = {9: "sigkill", 6: "sigabrt", 11: "sigsegv", 7: "sigbus", 15: "sigterm", 4: "sigill"}

KILLED_STEP = (
    "SIGKILL comes from outside the process: the kernel's OOM killer (host memory) or the scheduler "
    "(time or memory limit); confirm on that node with `dmesg -T | grep -i -e oom -e killed` or "
    "`journalctl -k`, and with `sacct -j JOB --format=JobID,State,ExitCode,MaxRSS` under SLURM"
)
#: The deaths faulthandler writes a dump for (rankscope.logs.fatal.SIGNAL_CAUSES).
CRASH_CAUSES = frozenset(SIGNAL_CAUSES.values())
#: faulthandler's dumps kept per log (a rank dies once; a restarted job a few times).
KEPT_DUMPS = 64
#: A C++ exception nobody caught (libstdc++'s words), and its message on one of the next lines.
_TERMINATE_NEEDLE = b"terminate called after throwing"
#: libstdc++ when a process ends with a std::thread still joinable (torch.distributed's threads, the
#: process group never destroyed): the process was exiting (its main returned, or sys.exit).
_NO_EXCEPTION_NEEDLE = b"terminate called without an active exception"
SIGABRT_AT_EXIT = "sigabrt_at_exit"
_AT_EXIT_WORDS = (
    " after 'terminate called without an active exception' ({where}): it was exiting, its main returned "
    "or it called sys.exit, while torch.distributed's threads still ran (no destroy_process_group)"
)
_AT_EXIT_STEP = (
    "where the other ranks failed waiting for it (a peer lost), this rank left before a collective they "
    "were in: a branch only some ranks take (sys.exit or a return on one rank, a save only rank 0 does); "
    "end every rank's work with dist.destroy_process_group() so that its exit is clean"
)
_TERMINATE = re.compile(rb"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(rb"\s*what\(\):\s+(.*)")
_WHAT_REACH = 3
#: glibc's assert(): ``python: src/psm2_nccl_net.c:812: mq_progress_loop: Assertion `r->used' failed.``
_ASSERT_NEEDLE = b"Assertion `"
_ASSERT = re.compile(
    rb"(?:^|: )(?P<file>[^\s:]+):(?P<line>\d+): (?P<func>[^:]{1,200}): Assertion `(?P<expr>.{0,300})' failed\."
)
_ASSERT_STEP = (
    "a C or C++ assert() in native code failed and aborted the process: the file and function name the "
    "library (a plugin, an extension, NCCL's net plugin); check its version against torch's and NCCL's, "
    "and the rank's core file for the whole stack (`rankscope core bt`)"
)
#: What a ``cpp_exception`` finding adds to the exception's type and message.
CPP_UNCAUGHT = " (a C++ exception that nothing caught: the process aborted)"
_CPP_STEP = (
    "the message says what failed; torch's `Exception raised from FUNCTION at FILE:LINE` lines after it "
    "name the C++ check, and the rank's core file the whole native stack (`rankscope core bt`)"
)
#: std::bad_alloc: operator new found no host memory (or a size computed wrong asked for too much).
_BAD_ALLOC_STEP = (
    "C++ could not allocate host memory: check the node's memory when it died (the kernel log for the "
    "OOM killer, `free -g`), DataLoader workers and pinned-memory buffers, and a size computed from "
    "bad input (a negative or huge shape)"
)
#: What to do next about a death by a signal the process raised itself (native code crashed).
CRASH_STEPS = {
    "sigsegv": "a crash in native code: the rank's core file names the frame (`rankscope core bt`; "
    "`ulimit -c unlimited` before the launcher if none was written), or rerun with PYTHONFAULTHANDLER=1 "
    "to print every thread's Python stack when it crashes",
    "sigabrt": "abort() in native code (a failed C++ check of torch or NCCL, or a double free): the rank's "
    "lines just before it say why; its core file names the frame (`rankscope core bt`)",
    "sigbus": "a bus error: in a container most often a /dev/shm too small for the DataLoader's workers or "
    "NCCL's buffers (`docker run --shm-size`, a memory-backed emptyDir on Kubernetes), else a mapped file "
    "that shrank; the rank's core file names the frame (`rankscope core bt`)",
    "sigill": "an illegal instruction: a binary or extension built for another CPU (or GPU architecture) "
    "than this node's; the rank's core file names the frame (`rankscope core bt`)",
}
WORKER_DIED_STEP = (
    "a worker that ends with no traceback was killed (the kernel's OOM killer: `dmesg -T | grep -i "
    "killed`) or crashed in native code (a segfault: its core file, `rankscope core bt`); the errors "
    "of the engine after it (`cancelled`, EngineDeadError) are its consequences"
)
MPI_ABORT_STEP = (
    "the rank chose to abort: its own lines before the abort say why (an uncaught exception under "
    "mpi4py's excepthook, a failed check); with several ranks' output in one file, tag them "
    "(mpirun --tag-output) to tell that rank's lines apart"
)
ELSEWHERE_STEP = (
    "the ranks' own tracebacks are not in this log: read the workers' output (torchrun --tee 3, "
    "--log-dir DIR keeps one file per rank; `rankscope logs errors DIR`), and wrap main in "
    "torch.distributed.elastic.multiprocessing.errors.record so the error file holds the traceback"
)


#: The kernel's OOM killer on the node (not SLURM's cgroup, not a pod's limit).
KERNEL_OOM_STEP = (
    "host memory, not GPU memory: the node's RAM ran out (the kernel's `Out of memory` lines list the "
    "largest processes); lower the DataLoader's workers and prefetch, pinned-memory buffers or the ranks "
    "per node, or move to nodes with more memory"
)


WATCHDOG_ABORT = (
    " after torch's NCCL watchdog fired (it aborts the process after a collective timeout or a hang: "
    "a consequence)"
)
#: The same after an NCCL error: torch's error handling tears the process down with abort().
NCCL_ABORT = " after an NCCL error or its watchdog's end (torch aborts the process on it: a consequence)"


def _collective(watch: _Watch) -> str:
    """``ALLREDUCE (SeqNum=4)``, ``SeqNum=308`` (torch 2.3-2.5's line names no collective), ``BROADCAST``
    (torch 1.x numbers none)."""
    if watch.op == "?":
        return f"SeqNum={watch.seq}"
    return watch.op if watch.seq == "?" else f"{watch.op} (SeqNum={watch.seq})"


def _lines_with(chunk: bytes, needle: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of ``chunk`` that holds ``needle`` (a line once per needle in it)."""
    pos = chunk.find(needle)
    while pos >= 0:
        start = chunk.rfind(b"\n", 0, pos) + 1
        end = chunk.find(b"\n", pos)
        end = len(chunk) if end < 0 else end
        yield start, end
        pos = chunk.find(needle, end)


def _behind(watches: list[_Watch], first: _Watch) -> tuple[_Watch, list[_Watch]]:
    """Where the ranks' timed-out collectives are of one process group and numbered, the one with
    the lowest sequence number is the collective some rank never joined: the ranks at a higher one
    had completed it (torch's watchdog reports each rank's oldest unfinished work). Its first line,
    and the watches past it (none: one number, several groups, or a line without a number)."""
    if len({w.pg for w in watches}) != 1 or not all(w.seq.isdigit() for w in watches):
        return first, []
    lowest = min(int(w.seq) for w in watches)
    later = [w for w in watches if int(w.seq) > lowest]
    if not later:
        return first, []
    return min((w for w in watches if int(w.seq) == lowest), key=lambda w: w.order), later


def _aborted_by_watchdog(finding: Finding, why: str = WATCHDOG_ABORT) -> Finding:
    """A launcher's report of a SIGABRT that comes after watchdog lines (or an NCCL error) in the log:
    torch's watchdog aborted the rank (after a collective timeout, its own hang, or a communicator's
    error), so the death is no cause of its own; so is faulthandler's dump of that abort (``Fatal
    Python error: Aborted``). A SIGABRT reported before any such line (a rank that aborted first)
    stays a culprit."""
    if (
        finding.kind not in (Kind.LAUNCHER, Kind.NATIVE_CRASH)
        or finding.cause != "sigabrt"
        or finding.role != CULPRIT
    ):
        return finding
    return replace(finding, role=VICTIM, what=finding.what + why, next_step="")


#: A launcher's report of a death that a network error of the same process (NCCL's NET/IB
#: completion error) came before: the death is that error's consequence (a Ray raylet's "worker died"
#: after the worker's own IB error, a public OpenRLHF thread's shape).
_DIES_OF_NETWORK = frozenset({"worker_died", "sigabrt"})


def _pid_of(who: Optional[str]) -> Optional[int]:
    process = process_of(who)
    return process[1] if process is not None else None


def _died_of_its_network_error(out: list[Finding]) -> list[Finding]:
    """Matched by the process's pid (``host,pid=N``: NCCL's line names its host by name, the raylet by
    its IP), in one source."""
    network = {
        (f.source, pid): f
        for f in out
        if f.kind == Kind.NETWORK and f.role == CULPRIT and (pid := _pid_of(f.who)) is not None
    }

    def explained(f: Finding) -> Finding:
        pid = _pid_of(f.who)
        cause = network.get((f.source, pid)) if pid is not None else None
        if f.kind != Kind.LAUNCHER or f.role != CULPRIT or f.cause not in _DIES_OF_NETWORK or cause is None:
            return f
        if cause.order > f.order:  # the death came first: the error may be its consequence
            return f
        after = f" after its own network error (line {cause.line}: {cause.cause}): a consequence"
        return replace(f, role=VICTIM, what=f.what + after, next_step="")

    return [explained(f) for f in out] if network else out


def signal_cause(number: int) -> str:
    return _SIGNAL_NAMES.get(number, f"signal_{number}")


def _spawn_code(match: re.Match[bytes]) -> int:
    """The exit of a ``torch.multiprocessing.spawn`` child: minus its signal's number, or its code."""
    name = match.group(2)
    if name is not None:
        try:
            return -int(signals.Signals[name.decode()])
        except KeyError:
            return -1
    return int(match.group(3))


def shell_signal(code: int) -> Optional[int]:
    """The signal N of an exit code 128+N, for the signals that end jobs: how a shell (torchrun
    --no-python, a wrapper script) or a container runtime reports a child killed by N."""
    return code - 128 if code - 128 in _SIGNAL_NAMES else None


@dataclass
class _Watch:
    """Watchdog lines of one rank: the first collective that timed out."""

    who: Optional[str]
    rank: Optional[int]
    seq: str
    op: str
    numel: str
    pg: Optional[str]
    source: str
    line: int
    order: int
    time: Optional[str] = None


#: torch's message of an NCCL failure (``DistBackendError: NCCL error in: ...``): NCCL's reason follows it.
_NCCL_ERROR = b"NCCL error"


@dataclass
class _Reading:
    """The lines a rank wrote after its exception line ``key``, read while they come (a block may
    end before them): its prefix, the lines so far, the bytes still searched."""

    key: tuple[str, int]
    raw: bytes
    lines: list[str] = field(default_factory=list)
    reach: int = TAIL_REACH
    done: bool = False


@dataclass
class LineEvidence:
    """Feed it blocks of whole lines per source; read :meth:`findings` at the end."""

    #: Exception lines per rank label: (text, source, line, order, global rank), the first few.
    exception_lines: dict[Optional[bytes], list[tuple[str, str, int, int, Optional[int]]]] = field(
        default_factory=dict
    )
    findings_: list[Finding] = field(default_factory=list)
    watch: dict[object, _Watch] = field(default_factory=dict)
    #: The world size the log tells (the largest NCCL communicator's, Lightning's count); 0: unknown.
    world: int = 0
    #: Ranks whose watchdog the heartbeat monitor found stuck: key -> (who, rank, seconds, source, line,
    #: order, glog time).
    stuck: dict[object, tuple[Optional[str], Optional[int], str, str, int, int, Optional[str]]] = field(
        default_factory=dict
    )
    first_timeout: list[Finding] = field(default_factory=list)
    #: torch.distributed errors that name their cause (collective mismatch, port in use, DDP).
    c10d: C10dLines = field(default_factory=C10dLines)
    _nccl_seen: set[tuple[str, str]] = field(default_factory=set)
    #: NCCL WARN lines that are no finding of their own (a refused connection, a failed verbs call:
    #: set-up facts), the first :data:`KEPT_WARNINGS`: (who, message, source, line). A traceback of
    #: NCCL's "unhandled system error" shows them as its reason.
    nccl_warnings: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: The GPU faults NVIDIA's driver reported in the log (Xids a program does not cause): (what,
    #: source, line). A CUDA error then is the fault's, not an asynchronous kernel error to rerun.
    gpu_faults: list[tuple[str, str, int]] = field(default_factory=list)
    _xids_seen: set[int] = field(default_factory=set)
    _pods_seen: set[str] = field(default_factory=set)
    #: Where torch's NCCL watchdog thread first ended on an exception (its order): a SIGABRT after it is its abort.
    _watchdog_ended: Optional[int] = None
    _evicted_seen: set[str] = field(default_factory=set)
    _cancelled_seen: set[tuple[str, str]] = field(default_factory=set)
    #: The launchers (their node's prefix) whose signal is a finding already.
    _stopped_seen: set[Optional[str]] = field(default_factory=set)
    _finished_seen: set[tuple[str, Optional[str]]] = field(default_factory=set)
    #: libstdc++'s ``terminate called without an active exception``: (source, its prefix's rank, its line).
    _at_exit: list[tuple[str, Optional[str], int]] = field(default_factory=list)
    _source: str = ""
    #: NCCL's reason after an exception line of an NCCL failure: (source, line) -> its error name and
    #: ``Last error:`` detail (rankscope.logs.nccl_reason).
    reasons: dict[tuple[str, int], NcclReason] = field(default_factory=dict)
    #: Whether an exception line of the block being read names one of rankscope.logs.c10d_errors' failures.
    _c10d_here: bool = False
    _terminate_here: bool = False
    _crash_here: bool = False
    #: Whether an exception line of the block being read is torch's message of an NCCL failure.
    _nccl_error_here: bool = False
    _reading: list[_Reading] = field(default_factory=list)
    #: The stacks torch prints under a timed-out collective (the user's frame of each rank's).
    stacks: CollectiveTraces = field(default_factory=CollectiveTraces)
    #: faulthandler's dumps (rankscope.logs.fatal): a rank's place when it died of a fatal signal.
    fatal_dumps: list[FatalDump] = field(default_factory=list)
    #: The last block of a rank's own file and its first line number (:meth:`_own_dump`).
    _last_block: Optional[tuple[bytes, int]] = None
    #: Whether a line of the block being read heads such a stack.
    _stack_here: bool = False
    #: The kernel's OOM kills in the log (pasted dmesg), by pid: the kill, source, line, order.
    _oom_kills: dict[int, tuple[OomKill, str, int, int]] = field(default_factory=dict)
    #: The pid a launcher's line names for a death it reports: (source, line) -> pid.
    _death_pids: dict[tuple[str, int], int] = field(default_factory=dict)
    #: DeepSpeed's launchers: their spawn lines, and the workers of the node a failure report is of
    #: ((source, line) -> pid -> local rank): the pid the kernel's OOM killer names says which one.
    _deepspeed: DeepSpeedLaunchers = field(default_factory=DeepSpeedLaunchers)
    #: Where srun began ending the step (source, line): the tasks it reports killed after it are victims.
    _step_ending: Optional[tuple[str, int]] = None
    _death_workers: dict[tuple[str, int], tuple[Optional[bytes], dict[int, Optional[str]]]] = field(
        default_factory=dict
    )
    _index: int = -1
    _labels: SourceLabels = PLAIN
    _lines_before: int = 0

    def start_source(self, name: str, labels: SourceLabels = PLAIN) -> None:
        self._end_reasons()
        self.stacks.end()
        self._own_dump()
        self._source, self._labels, self._lines_before = name, labels, 0
        self._index += 1

    def _own_dump(self) -> None:
        """A rank's own file (torchrun --log-dir: its label from the path) ends with its faulthandler
        dump when it died of a fatal signal: the last block of such a file is searched, once."""
        last, self._last_block = self._last_block, None
        label = self._labels.label(None)
        if (
            last is None
            or label is None
            or FATAL_NEEDLE not in last[0]
            or len(self.fatal_dumps) >= KEPT_DUMPS
        ):
            return
        chunk, first_line = last
        who = label_text(label)
        found = parse_dumps(chunk.decode("utf-8", "replace"), self._source, first_line, who)
        known = {(d.source, d.line) for d in self.fatal_dumps}
        self.fatal_dumps.extend(d for d in found if (d.source, d.line) not in known)

    def order(self, line: int) -> int:
        """A position comparable across sources: input order, then line."""
        return (self._index << 40) + line

    def feed(self, chunk: bytes, lines: int, unprefixed: int = 1) -> None:
        """Read a block of whole lines; ``unprefixed``: how many of its lines carry no rank prefix
        (launchers' own lines never do, so a block without such lines is not searched for them)."""
        cursor = [0, 0]

        def line_at(start: int) -> int:
            if start < cursor[0]:
                cursor[0], cursor[1] = 0, 0
            cursor[1] += chunk.count(b"\n", cursor[0], start)
            cursor[0] = start
            return self._lines_before + cursor[1] + 1

        # "NCCL" finds NCCL's WARN lines and torch's watchdog lines (WorkNCCL, ProcessGroupNCCL) in one scan.
        # torch.distributed's errors that name their cause are searched for only in a block where an
        # exception line names one (_exception_line): each needle is a pass over the block, and six
        # more passes cost a 1 GiB log 19% more CPU (docs/benchmarks.md).
        self._c10d_here = self._nccl_error_here = self._stack_here = self._terminate_here = False
        self._crash_here = False
        for reading in self._reading:  # NCCL's reason after an exception line of the block before
            self._read_on(chunk, reading, -1)
        for needle, handler in (
            (b"Error", self._exception_line),
            (b"NCCL", self._nccl_or_torch),
            (b"watchdog thread terminated", self._watchdog_cuda),
        ):
            self._scan(chunk, needle, handler, line_at)
        if self._c10d_here:
            for needle in C10D_NEEDLES:
                self._scan(chunk, needle, self._c10d, line_at)
        if self._nccl_error_here:
            self._nccl_reasons(chunk, line_at)
        if self._terminate_here:
            self._terminate(chunk, line_at)
        if self._stack_here or self.stacks.reading:
            # the "#N f from file:line" lines are looked for only after their header
            self.stacks.feed(chunk, self._stack_head, lambda start: self.order(line_at(start)))
        self._end_reasons(lambda r: r.done)
        launchers = unprefixed or self._labels.dialect is not None or self._labels.allow_srun
        for needle in DEEPSPEED_NEEDLES if launchers else ():
            if needle in chunk:
                self._scan(chunk, needle, self._deepspeed_worker, line_at)
        if launchers and (
            b"exit" in chunk
            or b"died with" in chunk
            or b"srun: error" in chunk
            or b"slurmstepd" in chunk
            or b"terminated with" in chunk
            or b"MPI_ABORT was invoked" in chunk
            or b"died unexpectedly" in chunk
            or RAY_WORKER_NEEDLE in chunk
        ):
            self._launcher(chunk, line_at)
        if unprefixed and (
            b"illed" in chunk or b"core dumped" in chunk or b"zsh: " in chunk or _SHELL_WORDS(chunk)
        ):
            self._shell(chunk, line_at)
            if b"Killed process" in chunk:  # the kernel's OOM killer, its lines pasted beside the job's
                self._scan(chunk, b"Killed process", self._kernel_oom, line_at)
        if unprefixed and b"NVRM: Xid" in chunk:  # the GPU driver's kernel lines pasted beside the job's
            self._scan(chunk, b"NVRM: Xid", self._xid, line_at)
        # each scan of a block costs 0.1-0.4 s a GiB: these look only where a line of the block has no
        # rank prefix (Lightning's and torchrun's agent's own lines have none)
        if unprefixed and b"processes registered" in chunk:
            for size in _STARTING.finditer(chunk):
                self.world = max(self.world, int(size.group(1)))
        if launchers and STOPPED_NEEDLE in chunk:
            self._scan(chunk, STOPPED_NEEDLE, self._stopped, line_at)
        # torchrun's agent at LOGLEVEL=INFO (its exit barrier's error is read by _exception_line)
        if unprefixed and FINISHED_NEEDLE in chunk:
            self._scan(chunk, FINISHED_NEEDLE, self._finished, line_at)
        if unprefixed and (b"OOMKilled" in chunk or b"Evicted" in chunk):  # kubectl get pods, describe pod
            for event in pod_events(chunk):
                line_no = line_at(chunk.rfind(b"\n", 0, event.at) + 1)
                if event.reason == "OOMKilled":
                    self._pod_oom(event.pod, line_no)
                else:
                    self._evicted(event.pod, event.message, line_no)
        if b"*" in chunk and b"*** Process received signal" in chunk:  # "*": memchr, 4x faster
            self._native(chunk, line_at)
        if self._crash_here and _NO_EXCEPTION_NEEDLE in chunk and len(self._at_exit) < KEPT_DUMPS:
            for start, _end in _lines_with(chunk, _NO_EXCEPTION_NEEDLE):
                label = self._split(chunk[start:_end])[0]
                who = label_text(label) if label is not None else None
                self._at_exit.append((self._source, who, line_at(start)))
        if self._crash_here and _ASSERT_NEEDLE in chunk:
            # glibc's assert() before the abort (or the crash) a launcher reports: why native code stopped
            self._scan(chunk, _ASSERT_NEEDLE, self._native_assert, line_at)
        if self._crash_here and not self._terminate_here and _TERMINATE_NEEDLE in chunk:
            # a C++ exception whose type has no "Error" in its name (std::bad_alloc, std::out_of_range):
            # looked for only where a launcher reports a crash, as faulthandler's dump below
            self._terminate(chunk, line_at)
        # faulthandler's dumps, kept until the end: the launcher's report of the crash that pairs with
        # one may come blocks later (a log that goes on for megabytes after the crash), or never (Ray,
        # sglang). Searched in a block with lines no rank prefix names (where such dumps are written),
        # or with a launcher's report of a crash: a block of rank-prefixed lines alone is not searched
        # (one search of a 512-rank log's every block cost 4% of `logs errors`).
        searched = unprefixed or self._labels.dialect is not None or self._crash_here
        if searched and len(self.fatal_dumps) < KEPT_DUMPS and (first := chunk.find(FATAL_NEEDLE)) >= 0:
            start = chunk.rfind(b"\n", 0, first) + 1
            text = chunk[start:].decode("utf-8", "replace")
            line = self._lines_before + 1 + chunk.count(b"\n", 0, start)
            # a rank's own file (torchrun --log-dir): the dump is that rank's, as _own_dump names it
            own = label_text(self._labels.label(None)) if self._labels.fixed_label is not None else None
            found = parse_dumps(text, self._source, line, own)[: KEPT_DUMPS - len(self.fatal_dumps)]
            # a dump under a rank's prefix ("(RayWorkerWrapper pid=51878) Fatal Python error: ...") is that rank's
            self.fatal_dumps.extend(
                replace(d, who=self._prefix_label(d.prefix.encode())) if d.who is None and d.prefix else d
                for d in found
            )
        if self._labels.fixed_label is not None:  # a rank's own file: its last block is searched at its end
            self._last_block = (chunk, self._lines_before + 1)
        self._lines_before += lines

    @staticmethod
    def _scan(
        chunk: bytes, needle: bytes, handler: Callable[[bytes, int], None], line_at: Callable[[int], int]
    ) -> None:
        """Each line of ``chunk`` that holds ``needle``, once, to ``handler`` with its line number."""
        for start, end in _lines_with(chunk, needle):
            handler(chunk[start:end], line_at(start))

    def _nccl_or_torch(self, line: bytes, line_no: int) -> None:
        if b" nranks " in line and (size := _NRANKS.search(line)) is not None:
            self.world = max(self.world, int(size.group(1)))
        if b"NCCL WARN" in line:
            self._nccl(line, line_no)
        elif b"Watchdog caught" in line:
            self._watchdog(line, line_no)
        elif b"timeout from rank" in line:
            self._dump_from(line, line_no)
        elif b"watchdog got stuck" in line:
            self._stuck(line, line_no)
        elif b"Timeout at NCCL work" in line:
            self._timeout_at(line, line_no)
        elif STACK_HEADER in line:
            self._stack_here = True

    def continued_line(self) -> None:
        self._lines_before -= 1

    # -- per kind --------------------------------------------------------------------------

    def _prefix_label(self, prefix: bytes) -> Optional[str]:
        """The rank a line's prefix names: the source's own forms, else Ray's ``(Actor pid=N, ip=A) ``
        (a dump or an abort a Ray worker printed, in a log whose other lines have no such prefix)."""
        label = self._split(prefix + b"x")[0]
        if label is None:
            label = split_line(prefix + b"x", dialect=PAREN).label
        return label_text(label)

    def _split(self, line: bytes) -> tuple[Optional[bytes], bytes, bytes]:
        split = split_line(line, self._labels.allow_srun, self._labels.dialect)
        return self._labels.label(split.label), split.raw_prefix, split.text

    def _exception_line(self, line: bytes, line_no: int) -> None:
        if _TERMINATE_NEEDLE in line:  # a C++ exception's type (c10::Error, c10::DistBackendError, ...)
            self._terminate_here = True
            return
        # torchrun's agent after its workers all exited 0 (rankscope.logs.finished)
        if FINISHED_BARRIER in line:
            self._finished(line, line_no)
            return
        if not self._c10d_here and any(word in line for word in C10D_WORDS):
            self._c10d_here = True
        if not self._nccl_error_here and _NCCL_ERROR in line:
            self._nccl_error_here = True
        label, raw, text = self._split(line)
        if label is None and not nccl_error_line(text.strip().decode("utf-8", "replace")):
            # without a prefix, only an NCCL error's line is kept (its traceback may be cut from a
            # paste: torch's words and NCCL's reason after it are the whole story); the others are
            # their tracebacks' last lines, read there
            return
        text = text.strip()
        match = EXCEPTION_LINE.match(text)
        if match is None:
            return
        kept = self.exception_lines.setdefault(label, [])
        if len(kept) < PER_RANK:
            decoded = text[:1000].decode("utf-8", "replace")
            kept.append((decoded, self._source, line_no, self.order(line_no), torch_global_rank(raw)))

    def _nccl_reasons(self, chunk: bytes, line_at: Callable[[int], int]) -> None:
        """Each exception line of an NCCL failure in the block: the lines its rank writes next
        (NCCL's error name and ``Last error:``), read from here on (:meth:`_read_on`)."""
        for start, end in _lines_with(chunk, _NCCL_ERROR):
            label, raw, text = self._split(chunk[start:end])
            if EXCEPTION_LINE.match(text.strip()) and (
                label is not None or nccl_error_line(text.strip().decode("utf-8", "replace"))
            ):
                reading = _Reading((self._source, line_at(start)), raw)
                self._reading.append(reading)
                self._read_on(chunk, reading, end)

    @staticmethod
    def _read_on(chunk: bytes, reading: _Reading, after: int) -> None:
        """The rank's lines after ``after`` (the end of a line; -1: the block's start), until an empty
        line or a traceback header, :data:`MAX_TAIL` lines, or :data:`TAIL_REACH` bytes."""
        if reading.done:
            return
        stop = min(len(chunk), after + 1 + reading.reach)
        needle = b"\n" + reading.raw
        pos = after
        while len(reading.lines) < MAX_TAIL:
            if pos < 0 and chunk.startswith(reading.raw):
                line_start = 0
            else:
                found = chunk.find(needle, max(pos, 0), stop)
                if found < 0:
                    break
                line_start = found + 1
            line_end = chunk.find(b"\n", line_start)
            line_end = len(chunk) if line_end < 0 else line_end
            text = chunk[line_start + len(reading.raw) : line_end].strip()
            if not text or text.startswith(HEADER):
                reading.done = True
                return
            reading.lines.append(text[:1000].decode("utf-8", "replace"))
            pos = line_end
        reading.reach -= stop - (after + 1)
        reading.done = len(reading.lines) >= MAX_TAIL or reading.reach <= 0

    def _end_reasons(self, ended: Callable[[_Reading], bool] = lambda _r: True) -> None:
        """NCCL's reason of each exception line whose following lines are all read."""
        for reading in [r for r in self._reading if ended(r)]:
            reason = nccl_reason(reading.lines)
            if reason:
                self.reasons[reading.key] = reason
            self._reading.remove(reading)

    def _c10d(self, line: bytes, line_no: int) -> None:
        label, raw, text = self._split(line)
        seen = Seen(label_text(label), torch_global_rank(raw), self._source, line_no, self.order(line_no))
        self.c10d.feed(seen, text.strip()[:8192].decode("utf-8", "replace"))

    def _nccl(self, line: bytes, line_no: int) -> None:
        label, _raw, text = self._split(line)
        match = LINE.search(text)
        if match is None:
            return
        msg = match.group("msg").decode("utf-8", "replace").rstrip("\r")
        where = re.search(r"\] (\S+:\d+) NCCL", text.decode("utf-8", "replace"))
        who = (
            label_text(label)
            or f"{match.group('host').decode('utf-8', 'replace')},pid={int(match.group('pid'))}"
        )
        for signal in _SIGNALS:
            if signal.search(msg) is None:
                continue
            kind = Kind.NCCL
            if signal.name == IB_COMPLETION:
                found = signal.search(msg)
                status = found.group(2) if found is not None else "?"
                kind, cause, culprit = Kind.NETWORK, f"nccl:ib_completion_{status}", status != _IB_FLUSHED
            else:
                culprit = signal.name in NCCL_CULPRITS
                cause = NCCL_CULPRITS.get(signal.name) or NCCL_VICTIMS[signal.name]
            if (who, cause) in self._nccl_seen:
                return  # one finding per process and cause (NCCL repeats its WARNs)
            self._nccl_seen.add((who, cause))
            self.findings_.append(
                Finding(
                    kind,
                    cause,
                    CULPRIT if culprit else VICTIM,
                    who,
                    f"NCCL WARN {msg}",
                    where.group(1) if where else None,
                    self._source,
                    line_no,
                    self.order(line_no),
                    next_step="`rankscope logs nccl` explains this NCCL warning and its fix",
                )
            )
            return
        if len(self.nccl_warnings) < KEPT_WARNINGS and b" NCCL WARN " in text:
            self.nccl_warnings.append((who, msg, self._source, line_no))

    def _who(self, label: Optional[bytes], text: str) -> tuple[Optional[str], Optional[int]]:
        """The rank a torch line is about: its prefix, else torch's own ``[Rank N]`` in the text."""
        found = _RANK_IN_TEXT.search(text)
        if label is not None:
            rank = host_and_rank(label)[1]
            if rank is None and found is not None:  # a host's prefix (pdsh): torch's own [Rank N]
                rank = int(found.group(2))
            return label_text(label), rank
        if found is not None:
            return found.group(2), int(found.group(2))
        return None, None

    def _stack_head(self, line: bytes) -> tuple[Optional[str], bytes]:
        """The rank of a stack's header line, as :meth:`_watched` names it, and its raw prefix."""
        label, raw, text = self._split(line)
        return self._who(label, text.decode("utf-8", "replace"))[0], raw

    def _watchdog(self, line: bytes, line_no: int) -> None:
        label, _raw, raw_text = self._split(line)
        text = raw_text.decode("utf-8", "replace")
        work = _WATCHDOG.search(text)
        if work is None:
            return
        fields = dict(_WORK.findall(work.group(1)))
        self._watched(
            label,
            text,
            line_no,
            fields.get("SeqNum", "?"),
            fields.get("OpType", "?"),
            fields.get("NumelIn", "?"),
        )

    def _timeout_at(self, line: bytes, line_no: int) -> None:
        """torch's ``Timeout at NCCL work: N``: the sequence number only (the collective unnamed)."""
        label, _raw, raw_text = self._split(line)
        text = raw_text.decode("utf-8", "replace")
        found = _TIMEOUT_AT.search(text)
        if found is not None:
            self._watched(label, text, line_no, found.group(1), "?", "?")

    def _watched(
        self, label: Optional[bytes], text: str, line_no: int, seq: str, op: str, numel: str
    ) -> None:
        """A rank's watchdog timeout: the first line of each rank; a later line that names the
        collective fills in what an earlier one left out (``Timeout at NCCL work`` names none)."""
        pg = _RANK_IN_TEXT.search(text)
        who, rank = self._who(label, text)
        key = who if who is not None else (self._source, line_no)
        known = self.watch.get(key)
        if known is not None:
            if known.op == "?" and op != "?":
                known.op, known.numel = op, numel
                known.seq = seq if known.seq == "?" else known.seq
            return
        self.watch[key] = _Watch(
            who,
            rank,
            seq,
            op,
            numel,
            pg.group(1) if pg is not None and pg.group(1) is not None else None,
            self._source,
            line_no,
            self.order(line_no),
            _glog_time(text),
        )

    def _terminate(self, chunk: bytes, line_at: Callable[[int], int]) -> None:
        """``terminate called after throwing an instance of 'T'`` and its ``what():`` line: a C++
        exception nobody caught, the reason of the SIGABRT the launcher reports next."""
        for start, end in _lines_with(chunk, _TERMINATE_NEEDLE):
            label, _raw, text = self._split(chunk[start:end])
            kind = _TERMINATE.search(text)
            said = self._what_after(chunk, end, label)
            if kind is not None and said is not None:
                self._cpp_exception(label, kind.group(1).decode("utf-8", "replace"), said, line_at(start))

    def _what_after(self, chunk: bytes, pos: int, label: Optional[bytes]) -> Optional[str]:
        """The ``what():`` text on one of the few lines after ``pos`` that carry ``label``."""
        for _ in range(_WHAT_REACH):
            if pos >= len(chunk):
                return None
            end = chunk.find(b"\n", pos + 1)
            end = len(chunk) if end < 0 else end
            line_label, _raw, text = self._split(chunk[pos + 1 : end])
            found = _WHAT.match(text)
            if found is not None and line_label == label:
                return found.group(1).decode("utf-8", "replace").strip()
            pos = end
        return None

    def _cpp_exception(self, label: Optional[bytes], kind: str, said: str, line_no: int) -> None:
        if _WATCHDOG_CUDA.search(said):
            return  # the watchdog thread's CUDA error: its own reader (_watchdog_cuda) says it
        who, rank = self._who(label, said)
        if (who or "", "cpp_exception") in self._nccl_seen:
            return
        self._nccl_seen.add((who or "", "cpp_exception"))
        victim = VICTIM_MESSAGES.search(said) is not None
        step = "" if victim else _BAD_ALLOC_STEP if kind == "std::bad_alloc" else _CPP_STEP
        if not victim and "CUDA error" in said:
            step = ASYNC_STEP
        self.findings_.append(
            Finding(
                Kind.EXCEPTION_LINE,
                "cpp_exception",
                VICTIM if victim else CULPRIT,
                who,
                f"{kind}: {said[:300]}{CPP_UNCAUGHT}",
                None,
                self._source,
                line_no,
                self.order(line_no),
                global_rank=rank,
                exception=kind,
                next_step=step,
            )
        )

    def _native_assert(self, line: bytes, line_no: int) -> None:
        """glibc's report of a failed assert() in native code (the reason of the SIGABRT, or of the
        crash, that the launcher reports): a culprit of the rank its prefix names, placed in the C file."""
        label, raw, text = self._split(line)
        found = _ASSERT.search(text)
        if found is None or "block: [" in text.decode("utf-8", "replace"):
            return  # CUDA's device-side asserts have readers of their own (rankscope.logs.cuda)
        source, number, func, expr = (
            g.decode("utf-8", "replace") for g in found.group("file", "line", "func", "expr")
        )
        who, rank = self._who(label, "")
        # torchrun --tee's "[default3]:" names a local rank (the node's failure summary may give the global one)
        local = tee_local(raw) and rank is not None
        if local:
            rank = None
        if (who or "", "native_assert") in self._nccl_seen:
            return
        self._nccl_seen.add((who or "", "native_assert"))
        self.findings_.append(
            Finding(
                Kind.EXCEPTION_LINE,
                "native_assert",
                CULPRIT,
                who,
                f"assert() failed in native code: `{expr}` in {func} ({source}:{number})",
                f"{source}:{number}",
                self._source,
                line_no,
                self.order(line_no),
                global_rank=rank,
                exception="assert",
                next_step=_ASSERT_STEP,
                local=local,
            )
        )

    def _watchdog_cuda(self, line: bytes, line_no: int) -> None:
        """A CUDA error that torch's NCCL watchdog thread raised: this rank's own fatal error (the
        process aborts: ``terminate called ... what(): ...`` repeats it, torchrun says exitcode -6)."""
        label, raw, raw_text = self._split(line)
        text = raw_text.decode("utf-8", "replace").rstrip("\r")
        if self._watchdog_ended is None:  # torch's watchdog aborts the process after it, whatever the error
            self._watchdog_ended = self.order(line_no)
        found = _WATCHDOG_CUDA.search(text)
        if found is None:
            return
        who, _rank = self._who(label, text)
        if (who or "", "cuda_error") in self._nccl_seen:
            return
        self._nccl_seen.add((who or "", "cuda_error"))
        self.findings_.append(
            Finding(
                Kind.EXCEPTION_LINE,
                "cuda_error",
                CULPRIT,
                who,
                f"{found.group(1)} (raised in torch's NCCL watchdog thread: a kernel of this rank faulted "
                "on its GPU; the Python stack that launched it is not in the log)",
                None,
                self._source,
                line_no,
                self.order(line_no),
                global_rank=torch_global_rank(raw),
                time=_glog_time(text),
                next_step="rerun with CUDA_LAUNCH_BLOCKING=1 (or under compute-sanitizer) so the failing "
                "kernel raises where it is launched",
            )
        )

    def _stuck(self, line: bytes, line_no: int) -> None:
        label, _raw, raw_text = self._split(line)
        text = raw_text.decode("utf-8", "replace")
        found = _STUCK.search(text)
        if found is None:
            return
        who, rank = self._who(label, text)
        key = who if who is not None else (self._source, line_no)
        if key not in self.stuck:
            self.stuck[key] = (
                who,
                rank,
                found.group(1),
                self._source,
                line_no,
                self.order(line_no),
                _glog_time(text),
            )

    def _stuck_finding(self) -> list[Finding]:
        """Ranks whose NCCL watchdog made no progress. A consequence of a collective timeout (victims)
        where the rank timed out itself, or its line is stamped at or after the first timeout (the
        watchdog's abort and debug dump hung in the teardown: the monitor fires 480 s later).
        Otherwise a CUDA or NCCL call hangs in the rank, which reported no timeout of its own:
        culprits (the rank the others waited for, where some timed out)."""
        if not self.stuck:
            return []
        entries = sorted(self.stuck.values(), key=lambda s: s[5])
        ranks = sorted({s[1] for s in entries if s[1] is not None})
        timed_out = {w.rank for w in self.watch.values()} | {f.global_rank for f in self.first_timeout}
        times = sorted(w.time for w in self.watch.values() if w.time is not None)

        def consequence(
            entry: tuple[Optional[str], Optional[int], str, str, int, int, Optional[str]],
        ) -> bool:
            if entry[1] is not None and entry[1] in timed_out:
                return True
            return bool(times) and entry[6] is not None and entry[6] >= times[0]

        after_timeout = bool(self.watch or self.first_timeout) and all(consequence(s) for s in entries)
        if not after_timeout and (self.watch or self.first_timeout):
            entries = [s for s in entries if not consequence(s)]
            ranks = sorted({s[1] for s in entries if s[1] is not None})
        who, _rank, seconds, source, line, order, _time = entries[0]
        folded = str(RankSet.of(ranks)) if ranks else None
        named = RankSet.of(ranks).phrase() if ranks else "a rank"
        if after_timeout:
            text = (
                f"the NCCL watchdog of {named} made no progress for {seconds} s after the collective "
                "timeout: its abort and debug dump hung (a consequence)"
            )
            step = "the collective timeout above is the cause; this is its teardown"
        else:
            text = (
                f"the NCCL watchdog of {named} made no progress for {seconds} s: a CUDA or NCCL call hangs "
                "in the rank (a thread holding the GIL inside a CUDA call, a hung GPU or NCCL kernel)"
            )
            step = (
                "read the native stacks of that rank while it hangs (`rankscope stacks --native`): the "
                "thread inside a CUDA or NCCL call is the cause; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC sets "
                f"the {seconds} s"
            )
        return [
            Finding(
                Kind.WATCHDOG,
                "watchdog_stuck",
                VICTIM if after_timeout else CULPRIT,
                who if len(entries) == 1 else None,
                text,
                None,
                source,
                line,
                order,
                ranks=folded,
                global_rank=ranks[0] if len(ranks) == 1 else None,
                next_step=step,
            )
        ]

    def _dump_from(self, line: bytes, line_no: int) -> None:
        found = _DUMP_FROM.search(line)
        if found is None or self.first_timeout:
            return
        rank = found.group(1).decode()
        self.first_timeout.append(
            Finding(
                Kind.WATCHDOG,
                "watchdog_timeout",
                CULPRIT,
                rank,
                f"torch: the first collective timeout was on rank {rank} (the ranks dumped their "
                "flight recorders on its signal)",
                None,
                self._source,
                line_no,
                self.order(line_no),
                global_rank=int(rank),
                next_step="look at rank "
                + rank
                + "'s own lines and its stack while it hangs (`rankscope stacks`, `rankscope fr`)",
            )
        )

    def _launcher(self, chunk: bytes, line_at: object) -> None:
        assert callable(line_at)
        for match in DEEPSPEED_EXIT.finditer(chunk):
            start = chunk.rfind(b"\n", 0, match.start()) + 1
            end = chunk.find(b"\n", start)
            node = self._split(chunk[start : len(chunk) if end < 0 else end])[0]
            last = match.group(1).decode() if match.group(1) is not None else None
            said = self._deepspeed.exit(last, label_text(node))
            who = said.who if said.who is None or node is None else f"{label_text(node)}:{said.who}"
            if said.who is None:
                self._death_workers[(self._source, line_at(start))] = (node, said.workers)
            self._death(who, int(match.group(2)), "deepspeed", line_at(start), match, said.named, said.note)
        for pattern, read in (
            (_TORCHRUN_FAILED, lambda m: (m.group(2).decode(), int(m.group(1)), "torchrun")),
            (_MPIRUN, lambda m: (m.group(1).decode(), -int(m.group(4)), "mpirun")),
            (_MPIRUN_EXIT, lambda m: (m.group(1).decode(), int(m.group(2)), "mpirun")),
            (_SIGNALS_DIED, lambda m: (None, -int(m.group(2)), "accelerate")),
            (_SPAWN_EXIT, lambda m: (m.group(1).decode(), _spawn_code(m), "mp.spawn")),
            (_COMPOSER, lambda m: (m.group(1).decode(), int(m.group(2)), "composer")),
        ):
            for match in pattern.finditer(chunk):
                who, code, launcher = read(match)
                start = chunk.rfind(b"\n", 0, match.start()) + 1
                pid = _PID_GROUP.get(pattern)
                if pid is not None:  # the dead process's pid: the kernel's OOM lines name it too
                    self._death_pids[(self._source, line_at(start))] = int(match.group(pid))
                if who is not None and _NOUNS.get(launcher) == "local rank":
                    # a local rank is one of many: the line's own prefix (pdsh's host, srun's
                    # task, a pod) says which node's launcher wrote it
                    end = chunk.find(b"\n", start)
                    node = self._split(chunk[start : len(chunk) if end < 0 else end])[0]
                    who = who if node is None else f"{label_text(node)}:{who}"
                self._death(who, code, launcher, line_at(start), match)
        for match in _WORKER_DIED.finditer(chunk):
            line_no = line_at(chunk.rfind(b"\n", 0, match.start()) + 1)
            self._worker_died(match.group(1).decode("utf-8", "replace"), line_no)
        if RAY_WORKER_NEEDLE in chunk:
            for match in _RAY_WORKER_DIED.finditer(chunk):
                self._ray_worker_died(match, line_at(chunk.rfind(b"\n", 0, match.start()) + 1))
        for match in _MPI_ABORT.finditer(chunk):
            self._mpi_abort(match, line_at(chunk.rfind(b"\n", 0, match.start()) + 1))
        ending = _STEP_ENDING.search(chunk)
        if ending is not None and self._step_ending is None:
            self._step_ending = (self._source, line_at(chunk.rfind(b"\n", 0, ending.start()) + 1))
        for match in _SRUN.finditer(chunk):
            how = match.group(3)
            codes = {b"Killed": -9, b"Terminated": -15, b"Segmentation fault": -11, b"Bus error": -7}
            code = codes.get(how, -6)
            if match.group(4) is not None:
                code = int(match.group(4))
            who = match.group(2).decode()
            line_no = line_at(chunk.rfind(b"\n", 0, match.start()) + 1)
            if how == b"Out Of Memory":
                host = match.group(1).decode("utf-8", "replace")
                what = (
                    f"srun: task {who} on {host} was killed by the out-of-memory handler (host memory: the "
                    "job's cgroup limit, --mem)"
                )
                self._oom_killed(who, what, line_no)
            else:
                # srun killing the step's other tasks after one failed (or the step was cancelled):
                # their "Killed" says how they were stopped, not what went wrong
                ended = self._step_ending
                after = ended is not None and ended[0] == self._source and line_no > ended[1]
                teardown = after and how in (b"Killed", b"Terminated")
                self._death(who, code, "srun", line_no, match, victim=teardown)
        if b"slurmstepd" in chunk or b"srun: error: " in chunk:
            self._scheduler(chunk, line_at)

    def _shell(self, chunk: bytes, line_at: Callable[[int], int]) -> None:
        """A shell's word that the command it ran died of a signal (a line without a rank prefix)."""
        for match in _SHELL_DEATH.finditer(chunk):
            if self._split(match.group(0))[0] is not None:
                continue  # a rank's own line that happens to say so
            number = _SHELL_SIGNALS.get(match.group(1).lower(), 0)
            if number:
                self._death(None, -number, "shell", line_at(match.start()), match)

    def _stopped(self, line: bytes, line_no: int) -> None:
        """torchrun's ``Received 15 death signal``: the job stopped from outside (one per launcher)."""
        number = signal_of(line)
        label = self._split(line)[0]
        who = label_text(label) if label is not None else None
        if number is not None and who not in self._stopped_seen:
            self._stopped_seen.add(who)
            self.findings_.append(
                stopped_finding(number, who, self._source, line_no, self.order(line_no), "torchrun")
            )

    def _finished(self, line: bytes, line_no: int) -> None:
        """torchrun's ``worker group successfully finished``: every rank of its node exited 0 (one per launcher)."""
        label = self._split(line)[0]
        who = label_text(label) if label is not None else None
        key = (self._source, who)
        if key not in self._finished_seen:
            self._finished_seen.add(key)
            self.findings_.append(finished_finding(who, self._source, line_no, self.order(line_no)))

    def _culprit(
        self,
        cause: str,
        who: Optional[str],
        what: str,
        line_no: int,
        step: str,
        kind: Kind = Kind.LAUNCHER,
        global_rank: Optional[int] = None,
    ) -> None:
        """A culprit of this source's line ``line_no`` that names no place in the code (a launcher's,
        a scheduler's or a cluster's word on a process)."""
        self.findings_.append(
            Finding(
                kind,
                cause,
                CULPRIT,
                who,
                what,
                None,
                self._source,
                line_no,
                self.order(line_no),
                global_rank=global_rank,
                next_step=step,
            )  # fmt: skip
        )

    def _oom_killed(self, who: str, what: str, line_no: int, step: str = OOM_STEP) -> None:
        self._culprit(OOM_KILL, who, what, line_no, step)

    def _pod_oom(self, pod: str, line_no: int) -> None:
        if pod not in self._pods_seen:
            self._pods_seen.add(pod)
            what = f"kubectl: pod {pod} was OOMKilled: its container hit its memory limit"
            self._oom_killed(pod, what, line_no, POD_OOM_STEP)

    def _evicted(self, pod: str, message: str, line_no: int) -> None:
        """A pod the kubelet evicted: the node ran short of a resource, not the program (the
        ``describe`` form's message, where it has one, replaces the ``get pods`` row's finding)."""
        if pod in self._evicted_seen and not message:
            return
        self._evicted_seen.add(pod)
        self.findings_ = [f for f in self.findings_ if not (f.cause == "pod_evicted" and f.who == pod)]
        why = f": {message.rstrip('. ')}" if message else ""
        what = f"kubernetes: pod {pod} was evicted by the kubelet{why}"
        self._culprit("pod_evicted", pod, what, line_no, EVICTED_STEP)

    def _xid(self, line: bytes, line_no: int) -> None:
        """An NVIDIA Xid pasted from the kernel log: a fault of the GPU (its bus, its memory), the
        culprit; or one a program causes (an illegal address), whose CUDA error in the rank's own
        output is the finding (this one a victim of it)."""
        found = xid_line(line.decode("utf-8", "replace"))
        if found is None or found.xid in self._xids_seen:
            return
        self._xids_seen.add(found.xid)
        program = found.xid in XID_PROGRAM
        whose = (
            f" (pid {found.pid}{', ' + found.comm if found.comm else ''})" if found.pid is not None else ""
        )
        what = f"NVIDIA Xid {found.xid}: {xid_words(found.xid)}{whose}"
        if not program:
            self.gpu_faults.append((what, self._source, line_no))
        self.findings_.append(
            Finding(
                Kind.KERNEL,
                "gpu_ecc" if found.xid in XID_ECC else "gpu_xid",
                VICTIM if program or found.xid in XID_CONSEQUENCE else CULPRIT,
                None,
                what,
                None,
                self._source,
                line_no,
                self.order(line_no),
                next_step=xid_step(found.xid),
            )
        )

    def _kernel_oom(self, line: bytes, line_no: int) -> None:
        kill = oom_kill(line.decode("utf-8", "replace"))
        if kill is not None and kill.pid not in self._oom_kills:
            self._oom_kills[kill.pid] = (kill, self._source, line_no, self.order(line_no))

    def _oom_findings(self, out: list[Finding]) -> list[Finding]:
        """A launcher's SIGKILL of a pid the kernel's OOM killer names in the log is that kill (host
        memory); a Python process killed that no launcher line names is a finding of its own."""
        if not self._oom_kills:
            return out
        named: set[int] = set()
        result = []
        for finding in out:
            pid = self._death_pids.get((finding.source, finding.line))
            node, workers = self._death_workers.get((finding.source, finding.line), (None, {}))
            killed = [p for p in workers if p in self._oom_kills]
            if finding.cause == "sigkill" and pid is None and len(killed) == 1:
                # a launcher that does not say which worker died (DeepSpeed's): the one the kernel killed
                pid, local = killed[0], workers[killed[0]]
                who = local if local is None or node is None else f"{label_text(node)}:{local}"
                noun = "the worker" if who is None else f"local rank {who}"
                launcher = finding.what.split(":", 1)[0]
                what = f"{launcher}: {noun} was killed by signal 9"
                finding = replace(finding, who=who, what=what, local=who is not None)
            if finding.cause == "sigkill" and pid in self._oom_kills:
                kill = self._oom_kills[pid][0]
                named.add(pid)
                used = f", {kill.anon_rss} of host memory in use (anon-rss)" if kill.anon_rss else ""
                what = finding.what.replace(
                    " was killed by signal 9", f" (pid {pid}) was killed by the kernel's OOM killer"
                )
                finding = replace(finding, cause=OOM_KILL, what=what + used, next_step=KERNEL_OOM_STEP)
            result.append(finding)
        for pid, (kill, source, line_no, order) in self._oom_kills.items():
            if pid in named or not kill.comm.startswith(("python", "pt_", "torchrun")):
                continue
            used = f", {kill.anon_rss} of host memory in use (anon-rss)" if kill.anon_rss else ""
            what = f"the kernel's OOM killer killed {kill.comm} (pid {pid}){used}"
            result.append(
                Finding(
                    Kind.KERNEL,
                    OOM_KILL,
                    CULPRIT,
                    None,
                    what,
                    None,
                    source,
                    line_no,
                    order,
                    next_step=KERNEL_OOM_STEP,
                )
            )
        return result

    def _scheduler(self, chunk: bytes, line_at: Callable[[int], int]) -> None:
        """slurmstepd's lines (a job or step cancelled, and why; cgroup OOM kills) and srun's own (a node
        failure, a step it could not create)."""
        lines = sorted({*_lines_with(chunk, b"slurmstepd"), *_lines_with(chunk, b"srun: error: ")})
        for start, end in lines:
            line_no = line_at(start)
            found = scheduler_finding(
                chunk[start:end].decode("utf-8", "replace"), self._source, line_no, self.order(line_no)
            )
            if found is not None:
                key = dedupe_key(found)
                if key not in self._cancelled_seen:
                    self._cancelled_seen.add(key)
                    self.findings_.append(found)

    def _worker_died(self, worker: str, line_no: int) -> None:
        """vLLM's executor seeing a worker process end without its answer: a death with no traceback."""
        what = f"vLLM: worker {worker} died unexpectedly (no traceback of it: killed, or a native crash)"
        self._culprit("worker_died", worker, what, line_no, WORKER_DIED_STEP)

    def _ray_worker_died(self, match: re.Match[bytes], line_no: int) -> None:
        """Ray on a worker process that died while it ran a task: named as Ray's own prefix names that
        process (``IP,pid=N``); killed by Ray's memory monitor, an ``oom_kill``."""
        ip, pid = (group.decode("utf-8", "replace") for group in match.group(1, 2))
        who = f"{ip},pid={pid}"
        kind = (match.group(3) or b"").decode("utf-8", "replace")
        detail = (match.group(4) or b"").decode("utf-8", "replace").split(". There are some", 1)[0].strip()
        said = f" ({kind}{': ' + detail if detail else ''})" if kind or detail else ""
        if _RAY_LOW_MEMORY in (match.group(4) or b""):
            what = f"Ray: its memory monitor killed worker pid {pid} on {ip}: the node ran low on host memory"
            self._oom_killed(who, what, line_no, RAY_MEMORY_STEP)
            return
        what = f"Ray: worker pid {pid} on {ip} died while it ran a task{said}"
        self._culprit("worker_died", who, what, line_no, WORKER_DIED_STEP)

    def _mpi_abort(self, match: re.Match[bytes], line_no: int) -> None:
        """Open MPI's report that a rank called MPI_Abort (mpi4py's ``comm.Abort()``, its excepthook,
        Horovod): MPI_COMM_WORLD's rank; the reason is in that rank's own lines before it."""
        rank, code = match.group(1).decode(), int(match.group(3))
        what = f"mpirun: rank {rank} called MPI_ABORT (errorcode {code}; Open MPI then killed every process)"
        self._culprit("mpi_abort", rank, what, line_no, MPI_ABORT_STEP, Kind.LAUNCHER_SUMMARY, int(rank))

    def _deepspeed_worker(self, line: bytes, _line_no: int) -> None:
        self._deepspeed.worker(line, label_text(self._split(line)[0]))

    def _death(
        self,
        who: Optional[str],
        code: int,
        launcher: str,
        line_no: int,
        match: re.Match[bytes],
        unnamed: str = "",
        note: str = "",
        victim: bool = False,
    ) -> None:
        """A launcher's report of a worker's death; ``unnamed`` the worker in words where the report
        does not say which it was (``who`` None), ``note`` what else its line's words are."""
        if code == 0:
            return
        noun = _NOUNS.get(launcher, "the process")
        named = f"{noun} {who}" if who is not None else (unnamed or noun)
        # a shell's word names no rank: a launcher's report of the same death says more
        kind = Kind.LAUNCHER_SUMMARY if launcher == "shell" else Kind.LAUNCHER
        shell = ""
        number = shell_signal(code)
        if number is not None:  # 137: SIGKILL, 134: SIGABRT, 139: SIGSEGV
            code, shell = -number, f" (exit code {code}: 128+{number}, a shell or container's way to say so)"
        if code < 0:
            cause = signal_cause(-code)
            self._crash_here = self._crash_here or cause in CRASH_CAUSES
            what = f"{launcher}: {named} was killed by signal {-code}{shell}{note}"
            step = KILLED_STEP if cause == "sigkill" else CRASH_STEPS.get(cause, "")
        else:
            # an exit code: the process raised, and its traceback went to its own output
            kind, cause, step = Kind.LAUNCHER_SUMMARY, "tracebacks_elsewhere", ELSEWHERE_STEP
            what = f"{launcher}: {named} exited with code {code}{note}"
        role = VICTIM if cause == "sigterm" or victim else CULPRIT
        self.findings_.append(
            Finding(
                kind,
                cause,
                role,
                who,
                what,
                None,
                self._source,
                line_no,
                self.order(line_no),
                # mpirun names MPI_COMM_WORLD's rank, Composer its global rank
                global_rank=(
                    int(who)
                    if launcher in ("mpirun", "composer") and who is not None and who.isdigit()
                    else None
                ),
                next_step=step,
                local=who is not None and noun == "local rank",
            )
        )

    def _native(self, chunk: bytes, line_at: object) -> None:
        assert callable(line_at)
        for match in _OMPI_SIGNAL.finditer(chunk):
            host, pid = match.group(1).decode("utf-8", "replace"), int(match.group(2))
            head = f"[{match.group(1).decode('utf-8', 'replace')}:"
            block = chunk[match.end() : match.end() + 8192].decode("utf-8", "replace").splitlines()
            signal, frame = "", None
            for text in block:
                text = text.strip()
                if not text.startswith(head):
                    continue
                body = text.split("] ", 1)[-1]
                if body.startswith("Signal:"):
                    signal = body.split(":", 1)[1].strip()
                found = _OMPI_FRAME.match(body)
                if found is not None and frame is None and "libc.so" not in found.group(2):
                    frame = found.group(2).rsplit("[", 1)[0]
                if "End of error message" in body:
                    break
            line_no = line_at(match.start() + (1 if chunk[match.start() : match.start() + 1] == b"\n" else 0))
            self.findings_.append(
                Finding(
                    Kind.NATIVE_CRASH,
                    "native_crash",
                    CULPRIT,
                    f"{host},pid={pid}",
                    f"native crash: {signal or 'a fatal signal'}",
                    frame,
                    self._source,
                    line_no,
                    self.order(line_no),
                    next_step="the frames name the native library that crashed; a core file (`rankscope core`) "
                    "shows the rest",
                )
            )

    # -- the result --------------------------------------------------------------------------

    def findings(self, traced: set[tuple[Optional[bytes], str]]) -> list[Finding]:
        """Every finding; exception lines that a rebuilt traceback of their rank holds (``traced``:
        label and exception line) are left out, the traceback says it better."""
        self._end_reasons()
        self.stacks.end()
        self._own_dump()
        out = list(self.findings_)
        if any(f.cause == OOM_KILL and f.kind == Kind.LAUNCHER for f in out):
            # srun's "task N: Out Of Memory" names the task that slurmstepd's cgroup line does not
            out = [f for f in out if not (f.cause == OOM_KILL and f.kind == Kind.KERNEL)]
        for label, kept in self.exception_lines.items():
            for text, source, line, order, global_rank in kept:
                if (label, text) in traced:
                    continue
                name = EXCEPTION_LINE.match(text.encode())
                out.append(
                    Finding(
                        Kind.EXCEPTION_LINE,
                        "python_exception",
                        VICTIM if self._lost_peer(text, source, line) else CULPRIT,
                        label_text(label),
                        text,
                        None,
                        source,
                        line,
                        order,
                        global_rank=global_rank,
                        exception=name.group(1).decode() if name else None,
                    )
                )
                break
        out = name_the_lone_failure(out, "cpp_exception")
        out = self._oom_findings(out)
        if self.gpu_faults:  # a CUDA error beside the driver's GPU fault is the fault's: no rerun finds it
            fault, source, line = self.gpu_faults[0]
            step = f"the GPU failed ({fault}, {source} line {line}), not the program: {HARDWARE_STEP}"
            out = [
                replace(f, next_step=step) if f.cause == "cuda_error" and f.role == CULPRIT else f
                for f in out
            ]
        out += fatal_findings(self.fatal_dumps, out)
        watchdog = self._watchdog_findings()
        if watchdog:
            first = min(f.order for f in watchdog)
            out = [_aborted_by_watchdog(f) if f.order > first else f for f in out]
        nccl = [f.order for f in out if f.kind in (Kind.NCCL, Kind.NETWORK) and f.role == CULPRIT]
        if self._watchdog_ended is not None:  # "Process group watchdog thread terminated with exception"
            nccl.append(self._watchdog_ended)
        if nccl:  # an NCCL error (a NET/IB completion error, a CUDA failure in NCCL): the abort is torch's answer to it
            out = [_aborted_by_watchdog(f, NCCL_ABORT) if f.order > min(nccl) else f for f in out]
        return [*_died_of_its_network_error(self._aborted_at_exit(out)), *watchdog]

    def _aborted_at_exit(self, out: list[Finding]) -> list[Finding]:
        """A launcher's report of a rank's SIGABRT (a culprit) after libstdc++'s ``terminate called
        without an active exception`` of that rank (its prefix's, or with no prefix where one rank
        aborted): the rank was exiting with torch.distributed's threads alive, not failing a check."""
        if not self._at_exit:
            return out
        aborted = [f for f in out if f.kind == Kind.LAUNCHER and f.cause == "sigabrt" and f.role == CULPRIT]

        def at_exit(f: Finding) -> Finding:
            if f not in aborted:
                return f
            here = [(who, line) for source, who, line in self._at_exit if source == f.source]
            mine = [line for who, line in here if who is not None and who == f.who]
            bare = [line for who, line in here if who is None]
            lines = mine or (bare if len(aborted) == 1 else [])
            if not lines:
                return f
            where = f"line {lines[0]}"
            what = f.what + _AT_EXIT_WORDS.format(where=where)
            return replace(f, cause=SIGABRT_AT_EXIT, what=what, next_step=_AT_EXIT_STEP)

        return [at_exit(f) for f in out]

    def _lost_peer(self, text: str, source: str, line: int) -> bool:
        """Does the exception line say that a peer, the network or the launcher ended its rank? As
        for a traceback (rankscope.logs.roles.is_victim): its message, or, for a DistBackendError,
        NCCL's reason after it (``ncclRemoteError``, a connection reset by the peer)."""
        if VICTIM_MESSAGES.search(text):
            return True
        reason = self.reasons.get((source, line))
        return (
            reason is not None
            and nccl_error_line(text)
            and any(VICTIM_MESSAGES.search(said) for said in reason.lines())
        )

    def _stack_place(self, first: _Watch, watches: list[_Watch]) -> Optional[str]:
        """The user's frame of the timed-out collective, from torch's stack under it: the first
        rank's, else the earliest one printed by another rank that timed out (or with no rank named:
        a process's log without torch's ``[rankN]:`` marker); None when no such stack holds a frame
        of the user's own code."""
        places = self.stacks.places
        place = places.get(first.who)
        if place is None:
            whose = [*(w.who for w in watches), None]
            found = [p for p in (places.get(who) for who in whose) if p is not None]
            place = min(found, key=lambda p: p.order) if found else None
        return place.words() if place is not None else None

    def _desync_calls(self, seq: str, pg: Optional[str], watches: list[_Watch]) -> dict[tuple[str, str], str]:
        """`` on rank 1 from should_stop (train.py:31)`` for each collective of a desync: the ranks
        that called it and, where one printed the stack it was called from (torch's ``Stack trace of
        the failed collective``), the earliest such stack's frame of the user's code."""
        places = self.stacks.places
        ranks: dict[tuple[str, str], list[int]] = {}
        frames: dict[tuple[str, str], str] = {}
        for w in sorted(watches, key=lambda w: w.order):
            if w.seq != seq or w.pg != pg:
                continue
            key = (w.op, w.numel)
            if w.rank is not None:
                ranks.setdefault(key, []).append(w.rank)
            place = places.get(w.who)
            if place is not None and key not in frames:
                frames[key] = f" from {place.words()}"
        keys = set(ranks) | set(frames)
        return {
            k: (f" on {RankSet.of(ranks[k]).phrase()}" if k in ranks else "") + frames.get(k, "")
            for k in keys
        }

    def _absent(self, ranks: list[int], watches: list[_Watch]) -> list[int]:
        """The ranks of the job (its size known from the log) that reported no timeout, where every rank
        that did timed out in the same collective of the default group; else none."""
        if not self.world or not ranks or max(ranks) >= self.world or len({w.pg for w in watches}) != 1:
            return []
        if watches[0].pg not in (None, "0") or len({(w.seq, w.op) for w in watches}) != 1:
            return []
        return sorted(set(range(self.world)) - set(ranks))

    def _watchdog_findings(self) -> list[Finding]:
        stuck = self._stuck_finding()
        if not self.watch:
            return [*self.first_timeout, *stuck]
        watches = sorted(self.watch.values(), key=lambda w: w.order)
        first = watches[0]
        ranks = sorted({w.rank for w in watches if w.rank is not None})
        by_seq: dict[tuple[Optional[str], str], set[tuple[str, str]]] = {}
        for w in watches:
            if w.op != "?":  # a line that names no collective cannot disagree with one
                by_seq.setdefault((w.pg, w.seq), set()).add((w.op, w.numel))
        desync = next(((key, ops) for key, ops in by_seq.items() if len(ops) > 1), None)
        named = RankSet.of(ranks)
        folded = str(named) if ranks else None
        # one rank named: torch's own pointer ("what(): [PG 3 Rank 5] ..."); several: they all waited
        who = str(ranks[0]) if len(ranks) == 1 else None
        if desync is not None:
            (_pg, seq), ops = desync
            calls = self._desync_calls(seq, _pg, watches)
            names = ", ".join(
                sorted(f"{op} ({numel} elements){calls.get((op, numel), '')}" for op, numel in ops)
            )
            out = [
                Finding(
                    Kind.WATCHDOG,
                    "collective_desync",
                    CULPRIT,
                    None,
                    f"ranks called different collectives at one sequence number: {names}",
                    f"SeqNum={seq}" if _pg is None else f"PG {_pg} SeqNum={seq}",
                    first.source,
                    first.line,
                    first.order,
                    ranks=folded,
                    next_step="the ranks took different code paths (a collective inside a condition that "
                    "differs between ranks, or a different order): compare their stacks (`rankscope stacks`) "
                    "or flight recorders (`rankscope fr`)",
                )
            ]
        else:
            first, later = _behind(watches, first)
            text = f"collective {_collective(first)} timed out on {named.phrase() if ranks else 'rank ?'}: "
            if later:
                lowest = sorted({w.rank for w in watches if w.rank is not None} - {w.rank for w in later})
                passed = sorted({w.rank for w in later if w.rank is not None})
                text = f"collective {_collective(first)} timed out on {RankSet.of(lowest).phrase()}: "
                ahead = RankSet.of(passed).phrase() if passed else "other ranks"
                seqs = sorted({int(w.seq) for w in later})
                at = f"SeqNum={seqs[0]}" if len(seqs) == 1 else f"SeqNum={seqs[0]}-{seqs[-1]}"
                text += f"{NEVER_JOINED} ({ahead} had passed it and timed out later, at {at})"
            else:
                text += NEVER_JOINED
                absent = self._absent(ranks, watches)
                if len(absent) == 1:
                    who = str(absent[0])
                    text += (
                        f"; rank {absent[0]} is the one rank of the {self.world} (the job's size in this log) "
                        f"{ABSENT}"
                    )
            out = [
                Finding(
                    Kind.WATCHDOG,
                    "watchdog_timeout",
                    CULPRIT,
                    who,
                    text,
                    self._stack_place(first, watches)
                    or " ".join(part for part in (f"SeqNum={first.seq}", first.op) if "?" not in part)
                    or None,
                    first.source,
                    first.line,
                    first.order,
                    ranks=folded,
                    next_step="find the rank that is missing from these (stuck, dead or elsewhere): "
                    "`rankscope stacks` while it hangs, torch's flight recorder (`rankscope fr`)",
                )
            ]
        if self.first_timeout:
            # torch named the first rank that timed out: it comes before the collective's own finding
            out = [*self.first_timeout, *out]
        return [*out, *stuck]

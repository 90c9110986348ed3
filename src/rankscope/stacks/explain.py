"""Say in words where the ranks are: who waits in which collective, who is elsewhere (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from rankscope.folding import RankSet, describe_members
from rankscope.model import Frame, Member, RankId
from rankscope.stacks.inproc_collect import version_note
from rankscope.stacks.merge import job_reports
from rankscope.stacks.pyspy import UNKNOWN_NATIVE
from rankscope.stacks.report import Diagnosis, Finding, GpuStatus, StackGroup, StacksReport

#: Python-level entry points of torch.distributed (and DeepSpeed's comm layer) that block.
COLLECTIVES = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "all_reduce_coalesced",
        "broadcast",
        "broadcast_object_list",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_gather_coalesced",
        "_all_gather_base",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "send_object_list",
        "recv_object_list",
        "wait",
        "init_process_group",
        "new_group",
        "destroy_process_group",
        "rendezvous",
        "_store_based_barrier",
        "inference_all_reduce",
    }
)
_COMM_PATHS = ("torch/distributed/", "deepspeed/comm/", "torch/_C/_distributed")
_NATIVE_COLLECTIVE = re.compile(
    r"(c10d::|gloo::|nccl)[\w:]*?(allreduce|all_reduce|barrier|broadcast|allgather|all_gather|reduce_scatter|"
    r"reducescatter|alltoall|send|recv|wait|gather|scatter)",
    re.IGNORECASE,
)
_NATIVE_LOCK = re.compile(r"PyThread_acquire_lock|pthread_mutex_lock|sem_(timed)?wait|futex", re.IGNORECASE)
#: Native calls that wait for the GPU: the runtime's and the driver's synchronous calls (not *Async).
_GPU_WAIT = re.compile(
    r"(cuda(Device|Stream|Event)Synchronize|cu(Ctx|Stream|Event)Synchronize|cudaMemcpy|cuMemcpy)"
    r"(?!\w*Async)\w*"
)
#: What a thread blocks in at the bottom: a condition variable, a futex, a semaphore, a lock,
#: poll/epoll/select on a socket, a sleep.
_WAIT_PRIMITIVE = re.compile(
    r"pthread_cond_(timed|clock)?wait|pthread_mutex_(timed|clock)?lock|__lll_lock_wait|futex|"
    r"sem_(timed|clock)?wait|PyThread_acquire_lock|std::condition_variable::wait|"
    r"^(__)?(poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|recv|recvmsg|accept4?)$|"
    r"^(clock_)?nanosleep$"
)
_STDLIB = re.compile(r"/lib/python\d\.\d+/(?!site-packages|dist-packages)")


def is_stdlib(frame: Frame) -> bool:
    return frame.filename.startswith("<frozen") or bool(_STDLIB.search(frame.filename))


def is_library(frame: Frame) -> bool:
    """Code the user did not write: native, installed packages, or the standard library."""
    name = frame.filename
    return frame.is_native or "/site-packages/" in name or "/dist-packages/" in name or is_stdlib(frame)


def is_comm(frame: Frame) -> bool:
    return not frame.is_native and any(p in frame.filename for p in _COMM_PATHS)


def describe_frame(frame: Frame, short: bool = False) -> str:
    """``all_reduce (torch/distributed/distributed_c10d.py:3252)``; ``short`` shortens C++ names."""
    name = short_native_name(frame.function) if short and frame.is_native else frame.function
    return f"{name} ({frame.location})"


_LAMBDA = re.compile(r"\{lambda\([^{}]*\)#\d+\}")
#: C++ names longer than this many ``::`` parts keep the first and the last two.
NAMESPACE_PARTS = 3


def short_native_name(name: str) -> str:
    """A C++ symbol as a person reads it (docs/stacks.md, "Native frames"):

    template arguments become ``<…>``, argument lists are dropped (``(…)`` where the symbol had one
    inside a name), ``{lambda(...)#1}`` becomes ``{lambda}``, and a name of more than three
    ``::`` parts keeps its first and its last two: ``pybind11::…::{lambda}::_FUN``.
    """
    if "<" not in name and "(" not in name and name.count("::") < NAMESPACE_PARTS:
        return name
    name = _LAMBDA.sub("{lambda}", name)
    out: list[str] = []
    depth = 0
    for char in name:  # drop what is inside <...> and (...), nested ones included
        if char in "<(":
            if depth == 0:
                out.append(char + "…")
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
            if depth == 0:
                out.append(char)
        elif depth == 0:
            out.append(char)
    text = "".join(out)
    if text.endswith("(…)"):
        text = text[:-3]
    parts = text.split("::")
    if len(parts) > NAMESPACE_PARTS:
        text = "::".join([parts[0], "…", *parts[-2:]])
    return text


def is_anonymous(frame: Frame) -> bool:
    """A native frame py-spy could not name (``?? (libc.so.6)``)."""
    return frame.is_native and frame.function == UNKNOWN_NATIVE


def explaining_frames(frames: Sequence[Frame]) -> set[int]:
    """Indices of the native frames that say what a stack waits for (kept when native code is folded).

    The innermost c10d/gloo/NCCL work or collective frame, the outermost and innermost GPU
    synchronising calls (``cudaDeviceSynchronize`` ... ``cuCtxSynchronize_v2``), and the innermost wait
    primitive (``pthread_cond_wait``, futex, sem_wait, poll/epoll, a lock, a sleep).
    """
    keep: set[int] = set()
    gpu = [i for i, f in enumerate(frames) if f.is_native and _GPU_WAIT.match(f.function)]
    if gpu:
        keep.update((gpu[0], gpu[-1]))
    for pattern in (_NATIVE_COLLECTIVE, _WAIT_PRIMITIVE):
        for index in range(len(frames) - 1, -1, -1):
            frame = frames[index]
            if frame.is_native and pattern.search(frame.function):
                keep.add(index)
                break
    return keep


def gpu_wait(frames: Sequence[Frame]) -> Optional[str]:
    """The call a stack waits for the GPU in: ``cudaDeviceSynchronize`` (native frames), else
    ``torch.cuda.synchronize`` (its Python frame); None when it does not wait for the GPU."""
    for frame in frames:  # outermost first: the call torch made, not the driver's inside it
        if frame.is_native and _GPU_WAIT.match(frame.function):
            return frame.function
    for frame in reversed(frames):
        if not frame.is_native and frame.function.endswith("synchronize") and "torch/cuda/" in frame.filename:
            return f"torch.cuda.{frame.function}"
    return None


def backend_of(frames: Sequence[Frame]) -> Optional[str]:
    for frame in frames:
        if frame.is_native:
            name = frame.function
            if "NCCL" in name or name.startswith("nccl"):
                return "NCCL"
            if "Gloo" in name or "gloo::" in name:
                return "gloo"
    return None


@dataclass(frozen=True)
class Place:
    """Where one stack is, in the words a person wants."""

    #: e.g. "all_reduce (torch.distributed)"; None when not in a collective.
    collective: Optional[str]
    #: The user's frame that called the collective (or the innermost user frame).
    caller: Optional[Frame]
    #: The innermost frame (what py-spy prints first).
    innermost: Optional[Frame]
    waiting_on_lock: bool = False
    #: The call it waits for the GPU in (``cudaDeviceSynchronize``), when it does.
    gpu_call: Optional[str] = None
    #: The native c10d/gloo/NCCL frame a collective blocks in (``c10d::Work::wait``), with --native.
    native_wait: Optional[str] = None

    def where(self) -> str:
        """The place alone: ``all_reduce (torch.distributed) called from sync (train.py:30)``; "" without frames."""
        if self.collective:
            where = self.collective
            if self.caller is not None:
                where += f" called from {describe_frame(self.caller)}"
            if self.native_wait:
                where += f", blocked in {short_native_name(self.native_wait)}"
            return where
        if self.gpu_call:
            where = f"the GPU ({self.gpu_call})"
            return where + (f" called from {describe_frame(self.caller)}" if self.caller is not None else "")
        target = self.caller or self.innermost
        if target is None:
            return ""
        where = describe_frame(target)
        inner = self.innermost
        if inner is not None and inner != target and not inner.is_native:
            where = f"{describe_frame(inner)} called from {describe_frame(target)}"
        if self.waiting_on_lock:
            where += ", waiting for a lock"
        return where

    def text(self, plural: bool = True) -> str:
        """What the ranks do, its verb agreeing with them: ``waits in X`` (one) / ``wait in X`` (several)."""
        if self.collective:
            return f"{'wait' if plural else 'waits'} in {self.where()}"
        if self.gpu_call:
            return f"{'wait' if plural else 'waits'} for {self.where()}"
        if not self.where():
            return f"{'have' if plural else 'has'} no Python frames"
        return f"{'are' if plural else 'is'} in {self.where()}"

    def elsewhere(self, plural: bool) -> str:
        """``is elsewhere: load_batch (data.py:41)``, ``are elsewhere: they have no Python frames``;
        a wait for the GPU says so: ``waits for the GPU (cudaDeviceSynchronize) called from ...``."""
        if self.gpu_call:
            return self.text(plural)
        verb = "are" if plural else "is"
        if not self.collective and not self.where():
            return f"{verb} elsewhere: {'they have' if plural else 'it has'} no Python frames"
        return f"{verb} elsewhere: {self.where()}"


def locate(frames: Sequence[Frame]) -> Place:
    """Find the collective (outermost comm frame with a collective's name) and its user caller."""
    python_frames = [f for f in frames if not f.is_native]
    innermost = python_frames[-1] if python_frames else (frames[-1] if frames else None)
    lock = any(_NATIVE_LOCK.search(f.function) for f in frames[-6:] if f.is_native)
    for index, frame in enumerate(frames):
        short = frame.function.rsplit(".", 1)[-1]
        if is_comm(frame) and short in COLLECTIVES:
            package = "deepspeed.comm" if "deepspeed/comm/" in frame.filename else "torch.distributed"
            backend = backend_of(frames[index:])
            label = f"{short} ({package}{', ' + backend if backend else ''})"
            return Place(
                label, _user_before(frames, index), innermost, native_wait=_work_wait(frames[index:])
            )
    for index, frame in enumerate(frames):
        if frame.is_native and _NATIVE_COLLECTIVE.search(frame.function):
            backend = backend_of(frames[index:]) or "native"
            match = _NATIVE_COLLECTIVE.search(frame.function)
            op = match.group(2).lower() if match else "collective"
            return Place(
                f"{op} ({backend})", _user_before(frames, index), innermost, native_wait=_work_wait(frames)
            )
    user = [f for f in python_frames if not is_library(f)]
    return Place(None, user[-1] if user else None, innermost, waiting_on_lock=lock, gpu_call=gpu_wait(frames))


def _work_wait(frames: Sequence[Frame]) -> Optional[str]:
    """The innermost c10d/gloo/NCCL frame (``c10d::Work::wait``): what a collective blocks in natively."""
    for frame in reversed(frames):
        if frame.is_native and _NATIVE_COLLECTIVE.search(frame.function):
            return frame.function
    return None


def _user_before(frames: Sequence[Frame], index: int) -> Optional[Frame]:
    for frame in reversed(frames[:index]):
        if not frame.is_native and not is_library(frame):
            return frame
    return None


def _finding(kind: str, members: list[Member], place: Place, text: str) -> Finding:
    ranks = str(RankSet.of(m.rank for m in members if m.rank is not None))
    return Finding(
        kind, ranks, members, place.collective, place.caller, place.innermost, text, place.gpu_call
    )


def _findings(groups: Sequence[StackGroup]) -> list[tuple[Place, list[Member]]]:
    """Merge groups that are at the same place (they may differ in deeper library frames)."""
    places: dict[tuple[Optional[str], Optional[Frame], Optional[Frame]], tuple[Place, list[Member]]] = {}
    for group in groups:
        place = locate(group.frames)
        key = (place.collective, place.caller, None if place.collective else place.innermost)
        if key in places:
            places[key][1].extend(group.members)
        else:
            places[key] = (place, list(group.members))
    ordered = sorted(places.values(), key=lambda pm: (-len(pm[1]), min(_order(m) for m in pm[1])))
    return ordered


def _order(member: Member) -> int:
    return member.rank if member.rank is not None else member.pid


def _missing(report: StacksReport) -> list[int]:
    sizes = {p.rank.world_size for p in report.processes if p.rank.world_size}
    if len(sizes) != 1:
        return []
    world = sizes.pop()
    if world is None or world > 1_000_000:
        return []
    present = {p.rank.rank for p in report.processes if p.dumped and p.rank.rank is not None}
    return [r for r in range(world) if r not in present]


def diagnose(report: StacksReport) -> Diagnosis:
    """Who waits where, and who is elsewhere. Several jobs of one node are diagnosed apart (each
    job's ``diagnosis``); the one returned then joins theirs, each sentence under its job's name."""
    if not report.several_jobs():
        return _diagnose(report)
    joined = Diagnosis("")
    headlines = []
    for job, part in job_reports(report):
        diagnosis = _diagnose(part)
        name = job.describe() if job is not None else "processes of no job"
        if job is not None:
            job.diagnosis = diagnosis
        headlines.append(f"{name}: {diagnosis.headline}")
        joined.findings.extend(diagnosis.findings)
        joined.divergent.extend(diagnosis.divergent)
        joined.missing_ranks.extend(r for r in diagnosis.missing_ranks if r not in joined.missing_ranks)
        joined.notes.extend(f"{name}: {note}" for note in diagnosis.notes)
    joined.headline = " | ".join(headlines)
    joined.missing_ranks.sort()
    joined.__post_init__()
    return joined


def _diagnose(report: StacksReport) -> Diagnosis:
    multi_host = len({m.host for g in report.groups for m in g.members}) > 1

    def who(members: Sequence[Member]) -> str:
        return describe_members(members, with_hosts=multi_host)

    notes: list[str] = []
    for proc in report.processes:
        if proc.was_stopped:
            notes.append(
                f"{who([proc.member])} (pid {proc.pid}) was already stopped (SIGSTOP) before rankscope looked: "
                f"that alone hangs the job; resume it with kill -CONT {proc.pid}"
            )
        if proc.resumed:
            notes.append(f"pid {proc.pid} was left stopped by its dump; rankscope sent SIGCONT")
        if proc.retries and proc.dumped:
            tries = "retry" if proc.retries == 1 else "retries"
            notes.append(
                f"{who([proc.member])} (pid {proc.pid}) was dumped after {proc.retries} {tries}: "
                f"{proc.held_by or 'another tracer'} held it at first"
            )
    by_signal = [p.member for p in report.processes if p.via == "signal"]
    if by_signal:
        notes.append(
            f"{who(by_signal)} {'were' if len(by_signal) > 1 else 'was'} dumped through the in-process handler "
            "(a request to its own thread, no ptrace): Python frames only, function names without their class"
        )
    newer = [p for p in report.processes if p.handler_version is not None]
    if newer:
        notes.append(
            f"{who([p.member for p in newer])}: {version_note(max(p.handler_version or 0 for p in newer))}"
        )
    missing = _missing(report)
    if missing:
        notes.append(
            f"{_ranks(missing)} of world size {len(missing) + len(_present(report))} "
            f"{'were' if len(missing) > 1 else 'was'} not found: "
            "exited, on a node not examined, or failed to dump (see failures)"
        )
    places = _findings(report.main_groups())
    if not places:
        headline = "no stacks were collected" + (
            f"; {len(report.failures)} target{'s' if len(report.failures) > 1 else ''} failed (listed below)"
            if report.failures
            else ""
        )
        return Diagnosis(headline, missing_ranks=missing, notes=notes)
    if len(places) == 1:
        place, members = places[0]
        plural = _plural(members)
        if not plural:
            text = f"{who(members)} {place.text(plural=False)}"
        else:
            everyone = f"all {len(members)} {'processes' if members[0].rank is None else 'ranks'}"
            text = f"{everyone} ({who(members)}) {place.text()}"
        finding = _finding("together", members, place, text)
        if place.collective:
            text += (
                f". Nobody here is elsewhere: the rank {'they wait' if plural else 'it waits'} for is missing "
                "or on another node, or the collective itself is stuck in the network "
                "(check the other nodes with --hosts; NCCL_DEBUG=INFO)"
            )
        if missing:
            text += f"; missing: {_ranks(missing)}"
        notes.extend(gpu_notes(report, [finding], who))
        notes.extend(step_notes(report, [finding], who))
        return Diagnosis(text, [finding], [], missing, notes)

    waiting = [(p, m) for p, m in places if p.collective]
    elsewhere = [(p, m) for p, m in places if not p.collective]
    findings: list[Finding] = []
    divergent: list[Member] = []
    if waiting and elsewhere:
        for place, members in waiting:
            findings.append(
                _finding("waiting", members, place, f"{who(members)} {place.text(_plural(members))}")
            )
        for place, members in elsewhere:
            text = f"{who(members)} {place.elsewhere(_plural(members))}"
            findings.append(_finding("elsewhere", members, place, text))
            divergent.extend(members)
    else:
        (major_place, major), *minor = places
        kind = "waiting" if waiting else "elsewhere"
        findings.append(
            _finding(kind, major, major_place, f"{who(major)} {major_place.text(_plural(major))}")
        )
        for place, members in minor:
            plural = _plural(members)
            verb = place.text(plural) if waiting else place.elsewhere(plural)
            findings.append(_finding(kind, members, place, f"{who(members)} {verb}"))
            divergent.extend(members)
        if waiting:
            notes.append("the ranks are in different collectives or call sites: a mismatched collective call")
    headline = "; ".join(f.text for f in findings)
    notes.extend(gpu_notes(report, findings, who))
    notes.extend(step_notes(report, findings, who))
    return Diagnosis(headline, findings, divergent, missing, notes)


def steps_of(members: Sequence[Member], report: StacksReport) -> dict[int, list[Member]]:
    """The members that record a step (rankscope.progress), by step, lowest first."""
    step = {p.member: p.progress.step for p in report.processes if p.progress is not None}
    by_step: dict[int, list[Member]] = {}
    for member in members:
        value = step.get(member)
        if value is not None:
            by_step.setdefault(value, []).append(member)
    return dict(sorted(by_step.items()))


def step_notes(
    report: StacksReport, findings: Sequence[Finding], who: Callable[[Sequence[Member]], str]
) -> list[str]:
    """Ranks at one place but at different steps: the same line in different iterations of the loop.

    Sets ``finding.steps`` of each such finding.
    """
    notes = []
    for finding in findings:
        by_step = steps_of(finding.members, report)
        if len(by_step) < 2:
            continue
        finding.steps = {str(step): who(members) for step, members in by_step.items()}
        parts = "; ".join(f"step {step}: {who(members)}" for step, members in by_step.items())
        behind = next(iter(by_step.values()))
        verb = "are" if _plural(behind) else "is"
        notes.append(
            f"{who(finding.members)} are at the same place but at different steps ({parts}): the same line in "
            f"different iterations of the loop; {who(behind)} {verb} behind. In a collective, that is a "
            "desync: the ranks behind skipped a collective the others made (or the others made an extra one)"
        )
    return notes


#: GPU notes printed at most; more ranks waiting for their GPUs are counted.
GPU_NOTES = 8


def device_of(rank: Optional[RankId], gpus: Sequence[GpuStatus]) -> Optional[GpuStatus]:
    """The GPU a rank uses: the one numbered as its local rank (``torch.cuda.set_device(LOCAL_RANK)``),
    else the node's only GPU; None when neither says."""
    if rank is not None and rank.local_rank is not None:
        for gpu in gpus:
            if gpu.index == rank.local_rank:
                return gpu
    return gpus[0] if len(gpus) == 1 else None


def gpu_text(gpu: GpuStatus) -> str:
    """``GPU 0 (NVIDIA H100 80GB HBM3): 100% busy, 1234 of 81559 MiB used (nvidia-smi)`` and what it means."""
    facts = []
    if gpu.utilization is not None:
        facts.append(f"{gpu.utilization}% busy")
    if gpu.memory_used_mib is not None and gpu.memory_total_mib is not None:
        facts.append(f"{gpu.memory_used_mib} of {gpu.memory_total_mib} MiB used")
    text = (
        f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else "") + ": " + (", ".join(facts) or "no data")
    )
    text += f" ({gpu.source})"
    if gpu.utilization is not None and gpu.utilization >= 90:
        text += "; a kernel is running: one that never ends keeps its GPU at 100%"
    elif gpu.utilization == 0:
        text += "; no kernel ran in the last sample period: the GPU itself is idle"
    return text


def gpu_notes(
    report: StacksReport, findings: Sequence[Finding], who: Callable[[Sequence[Member]], str]
) -> list[str]:
    """One note per rank that waits for its GPU, with that GPU's utilisation and memory where known."""
    if not report.gpus:
        return []
    ranks = {p.member: p.rank for p in report.processes}
    by_host: dict[str, list[GpuStatus]] = {}
    for status in report.gpus:
        by_host.setdefault(status.host, []).append(status)
    notes = []
    waiting = [m for f in findings if f.gpu_wait for m in f.members]
    for member in waiting:
        gpu = device_of(ranks.get(member), by_host.get(member.host, []))
        if gpu is not None:
            notes.append(f"{who([member])} waits for {gpu_text(gpu)}")
    if len(notes) > GPU_NOTES:
        notes[GPU_NOTES:] = [f"... and {len(notes) - GPU_NOTES} more ranks waiting for their GPUs"]
    return notes


def _plural(members: Sequence[Member]) -> bool:
    """Whether ``describe_members`` names more than one (``ranks 1-2``, ``pids 41,57``, ``rank 0 + pid 7``)."""
    return len({m.rank for m in members if m.rank is not None}) + sum(m.rank is None for m in members) > 1


def _ranks(ranks: Sequence[int]) -> str:
    return RankSet.of(ranks).phrase()


def not_found_here(report: StacksReport, missing: Sequence[int]) -> list[int]:
    """The missing ranks that belong on the nodes examined: vanished, not merely elsewhere.

    With one local world size L for every rank (torchrun, mpirun by slot), rank r runs on node r // L;
    a rank of a node no process was found on is on a node not examined, and does not count. Without
    L every missing rank counts.
    """
    ranked = [p.rank for p in report.processes if p.rank.rank is not None]
    sizes = {r.local_world_size for r in ranked}
    local = sizes.pop() if len(sizes) == 1 else None
    if not local:
        return list(missing)
    nodes = {r.rank // local for r in ranked if r.rank is not None}
    return [r for r in missing if r // local in nodes]


def _present(report: StacksReport) -> set[int]:
    return {p.rank.rank for p in report.processes if p.dumped and p.rank.rank is not None}

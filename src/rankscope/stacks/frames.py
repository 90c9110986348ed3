"""The words for a stack's frames (pure): which are library code, collectives, waits for the GPU or a
lock, how a C++ name reads, and where one stack is (:func:`locate` into a :class:`Place`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from rankscope.model import Frame
from rankscope.stacks.pyspy import UNKNOWN_NATIVE

#: Python-level entry points of torch.distributed (and DeepSpeed's comm layer) that block.
#: ``all_gather_single`` and ``reduce_scatter_single`` are torch 2.13's (FSDP2 calls them);
#: ``wait_tensor`` is where a functional collective (DTensor, tensor parallel) is waited for.
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
        "all_gather_single",
        "_all_gather_base",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
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
        "wait_tensor",
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


def _package(filename: str) -> str:
    """Whose collective a frame is: DeepSpeed's, torch's distributed checkpoint's (whose steps are
    named after collectives: ``_DistWrapper.reduce_scatter`` gathers to a coordinator and scatters
    back), or torch.distributed's."""
    if "deepspeed/comm/" in filename:
        return "deepspeed.comm"
    if "torch/distributed/checkpoint/" in filename:
        return "torch.distributed.checkpoint"
    return "torch.distributed"


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
    #: Inside torch.compile (TorchDynamo's or Inductor's frames): compiling, not stuck.
    compiling: bool = False

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
        if self.compiling:
            where += f", inside torch.compile: {COMPILING}"
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
            package = _package(frame.filename)
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
    if innermost is not None and _in_autograd_engine(innermost) and gpu_wait(frames) is None:
        # DDP's reducer runs its gradient all_reduce from the autograd engine's C++ hooks: on gloo the
        # backward pass itself blocks in it, with no Python frame of the collective on the stack
        caller = user[-1] if user else None
        return Place(BACKWARD, caller, innermost, native_wait=_work_wait(frames))
    cpp = _cpp_collective(innermost) if innermost is not None else None
    if cpp is not None and gpu_wait(frames) is None:
        return Place(cpp, user[-1] if user else None, innermost, native_wait=_work_wait(frames))
    compiling = any(part in frame.filename for frame in python_frames for part in _COMPILERS)
    return Place(
        None,
        user[-1] if user else None,
        innermost,
        waiting_on_lock=lock,
        gpu_call=gpu_wait(frames),
        compiling=compiling,
    )


#: TorchDynamo and Inductor (torch/_dynamo/, torch/_inductor/): a stack through them is compiling. A
#: real job's first step under torch.compile on one rank (Inductor building C++ with gcc) looked like
#: ``Popen.communicate (subprocess.py)`` with 65 frames of torch folded away.
_COMPILERS = ("torch/_dynamo/", "torch/_inductor/")
COMPILING = (
    "compiling (the first steps of a compiled function take minutes, and one rank that recompiles, "
    "for a new shape, keeps the others waiting: a slow step, not a hang, unless it never ends)"
)


#: The autograd engine as the innermost Python frame: ``_engine_run_backward`` (torch >= 2.3, in
#: torch/autograd/graph.py) or ``backward`` calling the engine (torch/autograd/__init__.py).
BACKWARD = "backward (torch.autograd: DDP's gradient all_reduce runs inside it)"


def _in_autograd_engine(frame: Frame) -> bool:
    if frame.function == "_engine_run_backward":  # the name first: this runs for every stack located
        return frame.filename.endswith("torch/autograd/graph.py")
    return frame.function == "backward" and frame.filename.endswith("torch/autograd/__init__.py")


#: Python frames of torch that call a C++ collective (or a work's or a store's wait) directly, so that
#: no Python frame of the collective is on a rank's stack: (file, function) of the innermost frame ->
#: the wait. Each was seen on real jobs: every rank ran a step, one stalled before its next, and the
#: others waited here.
#:
#: DistributedDataParallel (torch 2.11 on CUDA, 2.13 on CPU, gloo): ``_pre_forward`` (the reducer's
#: one-time bucket rebuild, a broadcast from rank 0, runs in the second iteration's forward) and, with
#: a BatchNorm, ``_distributed_broadcast_coalesced`` (the module buffers, before every forward).
#: torch.distributed.pipelining (2.13, gloo): every schedule waits for its batched sends and receives
#: in ``_wait_batch_p2p``. torch.distributed.elastic (2.13): ``synchronize`` waits for every rank's key
#: in ``get_all``.
_CPP_WAITS: dict[tuple[str, str], str] = {
    ("torch/nn/parallel/distributed.py", "_pre_forward"): (
        "forward (DDP: the bucket rebuild of its second iteration is a collective)"
    ),
    ("torch/nn/parallel/distributed.py", "_distributed_broadcast_coalesced"): (
        "broadcast (DDP: the module buffers from rank 0, before each forward)"
    ),
    ("torch/distributed/utils.py", "_sync_params_and_buffers"): (
        "broadcast (DDP: parameters and buffers from rank 0, when it is built)"
    ),
    ("torch/distributed/utils.py", "_verify_param_shape_across_processes"): (
        "DDP's construction (its check of every rank's parameter shapes is a collective)"
    ),
    ("torch/distributed/pipelining/schedules.py", "_wait_batch_p2p"): (
        "send/recv (pipelining: the schedule waits for its stage's sends and receives)"
    ),
    ("torch/distributed/elastic/utils/store.py", "get_all"): (
        "synchronize (torch.distributed.elastic: it waits for every rank's key in the store)"
    ),
}


#: :data:`_CPP_WAITS` by function name: one lookup for every stack located, the file checked after.
_CPP_BY_NAME: dict[str, list[tuple[str, str]]] = {}
for (_suffix, _function), _label in _CPP_WAITS.items():
    _CPP_BY_NAME.setdefault(_function, []).append((_suffix, _label))


def _cpp_collective(frame: Frame) -> Optional[str]:
    """The wait in C++ (:data:`_CPP_WAITS`) whose frame is ``frame``, if any."""
    for suffix, label in _CPP_BY_NAME.get(frame.function.rpartition(".")[2], ()):
        if frame.filename.endswith(suffix):
            return label
    return None


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

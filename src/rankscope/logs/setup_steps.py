"""Errors whose words name a set-up cause, and what to look at: CUDA's and its libraries' status
names (the runtime, cuBLAS, cuDNN), gloo's failed mesh and torchrun's rendezvous timeout, as torch
prints them in a traceback. Facts of those libraries; pure (no I/O)."""

from __future__ import annotations

from rankscope.logs.roles import RDZV_CONNECTION, lost_store
from rankscope.logs.tracebacks import RankTraceback

#: Errors whose words say what to look at, as torch prints them: the words, then the next step.
_SETUP_STEPS = (
    (
        ("Duplicate GPU detected",),
        "two ranks use one GPU: each rank must call `torch.cuda.set_device(LOCAL_RANK)` (or pass "
        "`device_id` to `init_process_group`) before its first collective; where CUDA_VISIBLE_DEVICES "
        "is set per rank, check that the ranks' values differ",
    ),
    (
        ("ncclInvalidUsage",),
        "NCCL refused how it was called: its `Last error:` says why, rerun with NCCL_DEBUG=WARN if none "
        "is printed; most often two ranks on one GPU (no `torch.cuda.set_device(LOCAL_RANK)`), or ranks "
        "that disagree on the group's size or members",
    ),
    (
        ("CUBLAS_STATUS_NOT_INITIALIZED", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_INITIALIZED"),
        "cuBLAS/cuDNN could not create its handle, almost always because the GPU's memory was full at "
        "that moment: another process on the same GPU (ranks that never called "
        "`torch.cuda.set_device(LOCAL_RANK)` all share GPU 0), or this process's own cache; check the "
        "GPU's processes with `nvidia-smi` while the job starts",
    ),
    (
        ("invalid device ordinal",),
        "the process asked for a GPU that it cannot see: LOCAL_RANK (or the device index) is not below "
        "the number of visible GPUs; compare --nproc-per-node with the GPUs of the node and "
        "CUDA_VISIBLE_DEVICES",
    ),
    (
        ("no kernel image is available for execution on the device",),
        "this build of torch or of an extension has no code for this GPU's architecture: install a "
        "build for it (`torch.cuda.get_arch_list()` against `torch.cuda.get_device_capability()`), or "
        "rebuild the extension with TORCH_CUDA_ARCH_LIST set to it",
    ),
    (
        ("CUDA driver version is insufficient for CUDA runtime version",),
        "the node's NVIDIA driver is older than the CUDA that this torch was built with: update the "
        "driver, or install a torch built for an older CUDA (`nvidia-smi` shows the driver's CUDA version)",
    ),
    (
        ("system not yet initialized", "cudaErrorSystemNotReady", "Cuda failure 802"),
        "CUDA error 802 (cudaErrorSystemNotReady): the node is not ready for CUDA work, on NVSwitch "
        "systems (HGX, DGX) because NVIDIA's Fabric Manager is not running or does not match the "
        "driver; every rank of the node fails alike, so the node is the cause, not a rank: check "
        "`systemctl status nvidia-fabricmanager` and that its version equals the driver's (`nvidia-smi`)",
    ),
    (
        ("CUDA-capable devices are busy or unavailable",),
        "the GPU refused a new context: it is in exclusive-process compute mode with another process on "
        "it (two ranks on one GPU, or a leftover process), or it is unhealthy: `nvidia-smi -q -d COMPUTE` "
        "and the GPU's processes",
    ),
    (
        ("RendezvousTimeoutError",),
        "torchrun's rendezvous timed out: fewer nodes than `--nnodes` (its minimum) joined before the "
        "join timeout (600 s unless `--rdzv-conf join_timeout=` says otherwise); check that every node "
        "started torchrun with the same `--rdzv-id`, `--rdzv-endpoint` and `--nnodes`, that each reaches "
        "the endpoint (`rankscope net check`), and the log of the node that never joined",
    ),
    (
        ("Gloo connectFullMesh failed",),
        "gloo's ranks could not connect to one another: each advertises the address its hostname "
        "resolves to, which on Debian and Ubuntu is 127.0.1.1 (/etc/hosts) unless set otherwise, or an "
        "interface the other nodes cannot reach; set GLOO_SOCKET_IFNAME to the interface the nodes share "
        "(`rankscope net check` finds it) and check that no firewall drops their ports",
    ),
)


_STORE_AT_START = (
    "torchrun could not connect to the rendezvous store at `--rdzv-endpoint`: the node there has not "
    "started torchrun yet or listens elsewhere, a firewall drops the port, or the endpoint's name "
    "resolves to an address the other nodes cannot reach; `rankscope net check` from this node"
)
_STORE_LOST = (
    "this node's torchrun lost the rendezvous store while the job ran: the store lives in the torchrun "
    "of the `--rdzv-endpoint` node, and that torchrun ended (its ranks failed or finished there, or "
    "another job with the same endpoint ended first); the cause is in that node's log"
)


def setup_step(tb: RankTraceback) -> str:
    """The next step for an error whose words name a known cause (:data:`_SETUP_STEPS`), else ''."""
    if RDZV_CONNECTION in tb.exception:
        return _STORE_LOST if lost_store(tb) else _STORE_AT_START
    for words, step in _SETUP_STEPS:
        if any(word in text for word in words for text in (tb.exception, *tb.tail)):
            return step
    return ""

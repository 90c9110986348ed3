"""gpu-test inside one rank: pre-flight checks, the store, the process group, the checked all_reduce.

Runs in every rank of the user's launcher (torchrun, srun, mpirun ...). The rendezvous store is used
twice: before the backend starts (who arrived, which device each rank took) and after it (each rank's
result), so rank 0 can say which ranks failed and which never came even when a collective hangs.
torch is imported only here, and only when the test runs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

from rankscope.cmdline import flag, to_flags
from rankscope.errors import ExitCode, RankscopeError
from rankscope.folding import RankSet, fold_ints, parse_ints
from rankscope.gputest.checks import (
    DeviceSlot,
    Problem,
    check_hostname_address,
    check_interface_variables,
    check_master_address,
    duplicate_devices,
)
from rankscope.gputest.report import RankResult, Step, Summary, slurm_task_hosts, summarise
from rankscope.model import RankId
from rankscope.ranks import current_rank
from rankscope.serial import from_json, to_json

#: Test hook (set only by rankscope's own tests): the rank on this device slot corrupts its all_reduce result.
FAIL_DEVICE_HOOK = "RANKSCOPE_GPUTEST_FAIL_DEVICE"
#: Test hook: the rank on this device slot never returns from its all_reduce, as behind a stuck kernel.
HANG_DEVICE_HOOK = "RANKSCOPE_GPUTEST_HANG_DEVICE"
#: The device (slot) numbers of the local ranks, set by `--devices`/`--isolate`: on CPU each is a slot.
DEVICES_ENV = "RANKSCOPE_GPUTEST_DEVICES"
#: Where rank 0 writes its summary for `gpu-test --nproc` (the launcher's exit code comes from it).
VERDICT_ENV = "RANKSCOPE_GPUTEST_VERDICT"

PAYLOAD_ELEMENTS = 1 << 20  # 4 MiB of float32 per rank: device memory is really allocated and moved


@dataclass(frozen=True)
class GpuTestOptions:
    backend: Optional[str] = flag("--backend", None)  # None: nccl where CUDA is available, else gloo
    timeout: float = flag("--timeout", 60.0)
    nproc: Optional[int] = None
    devices: Optional[str] = None
    isolate: bool = False
    json: bool = False

    def rank_argv(self) -> list[str]:
        """The command line each rank of `--nproc`/`--isolate` runs: the same test, without the launching."""
        return ["gpu-test", *to_flags(self)]


@dataclass
class RankRun:
    """What one rank did; rank 0 also has the summary. ``hung``: a backend call never returned."""

    result: RankResult
    summary: Optional[Summary] = None
    hung: bool = False


def require_torch() -> Any:
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise RankscopeError(
            "gpu-test needs PyTorch and it is not installed in this environment",
            "pip install torch (the CPU build is enough for gloo)",
            ExitCode.MISSING_TOOL,
        ) from None
    return torch


def torch_installed() -> None:
    """The launcher's check: torch importable (without paying for its import; the ranks do that)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except ImportError:
        found = False
    if not found:
        require_torch()


def gpus_present() -> bool:
    """Whether this node has NVIDIA GPUs, without importing torch (the device files of the driver)."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def interface_names() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def resolve(name: str) -> list[str]:
    """The addresses ``name`` resolves to (empty when it does not)."""
    if not name:
        return []
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def preflight(env: Mapping[str, str], backend: str) -> list[Problem]:
    """The set-up mistakes this node shows before any backend starts (no torch needed); with
    ``backend`` "" the checks that depend on the backend are left out."""
    problems = check_interface_variables(env, interface_names())
    problems += check_master_address(env, resolve(env.get("MASTER_ADDR", "")))
    return problems + hostname_problems(env, backend)


def hostname_problems(env: Mapping[str, str], backend: str) -> list[Problem]:
    """The check that needs the backend: gloo advertising this node's name (loopback) to its peers."""
    hostname = socket.gethostname()
    return check_hostname_address(env, backend, hostname, resolve(hostname))


def wait_for_port(host: str, port: int, deadline: float) -> str:
    """Connect to ``host:port`` until it accepts or ``deadline`` (monotonic) passes; "" when it accepted,
    else the last reason (refused, timed out, does not resolve).

    TCPStore's own connect loop backs off past its timeout (10.3 s for a 5 s timeout here); this one
    ends on time, and says why.
    """
    reason = "not tried"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return reason
        try:
            with socket.create_connection((host, port), timeout=min(1.0, left)):
                return ""
        except socket.gaierror as exc:
            reason = f"{host} does not resolve ({exc.strerror})"
        except ConnectionRefusedError:
            reason = "connection refused (nothing listens there yet)"
        except socket.timeout:
            reason = "no answer (a firewall drops the packets, or the address is not on this network)"
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def default_backend(torch: Any) -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def local_slots(env: Mapping[str, str]) -> Optional[list[int]]:
    for name in (DEVICES_ENV, "CUDA_VISIBLE_DEVICES"):
        value = env.get(name, "").strip()
        if value and all(part.strip().isdigit() for part in value.split(",")):
            return [int(part) for part in value.split(",")]
    return None


def cpu_affinity() -> tuple[str, Optional[str]]:
    """This process's CPUs (folded) and the NUMA nodes they belong to, from /sys."""
    cpus = sorted(os.sched_getaffinity(0))
    nodes = []
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        try:
            listed = set(parse_ints((node / "cpulist").read_text().strip()))
        except (OSError, ValueError):
            continue
        if listed & set(cpus):
            nodes.append(int(node.name[4:]))
    return fold_ints(cpus), (fold_ints(nodes) if nodes else None)


def pci_numa_node(props: Any) -> Optional[str]:
    """The NUMA node of a CUDA device's PCI slot, from /sys (None when unknown)."""
    try:
        address = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        value = Path(f"/sys/bus/pci/devices/{address}/numa_node").read_text().strip()
    except (AttributeError, TypeError, ValueError, OSError):
        return None
    return value if value != "-1" else None


@dataclass
class _Progress:
    """Where the backend part of the test is; read by the watchdog when it gives up waiting."""

    step: Step = Step.INIT
    error: Optional[BaseException] = None
    wrong: str = ""
    done: bool = False
    extra: dict[str, str] = field(default_factory=dict)


def _collectives(
    torch: Any,
    dist: Any,
    state: _Progress,
    pg_store: Any,
    base: RankResult,
    slot: int,
    timeout: float,
    env: Mapping[str, str],
) -> None:
    try:
        device = torch.device(base.device)
        kwargs: dict[str, Any] = {}
        if device.type == "cuda":
            kwargs["device_id"] = device
        state.step = Step.INIT
        dist.init_process_group(
            base.backend,
            store=pg_store,
            rank=base.rank,
            world_size=base.world_size,
            timeout=timedelta(seconds=timeout),
            **kwargs,
        )
        state.step = Step.ALLOCATE
        payload = torch.full((PAYLOAD_ELEMENTS,), float(base.rank + 1), device=device)
        state.step = Step.ALL_REDUCE
        while env.get(HANG_DEVICE_HOOK, "") == str(slot):
            time.sleep(3600)  # the test hook: this device never finishes
        dist.all_reduce(payload)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if env.get(FAIL_DEVICE_HOOK, "") == str(slot):
            payload += 1  # the test hook: this device returns a wrong sum
        state.step = Step.CHECK
        world = base.world_size or 1
        expected = world * (world + 1) / 2
        wrong = int((payload != expected).sum().item())
        if wrong:
            state.wrong = (
                f"all_reduce returned a wrong sum in {wrong} of {PAYLOAD_ELEMENTS} elements"
                f" (first {payload.flatten()[0].item():g}, expected {expected:g})"
            )
        state.step = Step.BARRIER
        dist.barrier()
        state.done = True
    except BaseException as exc:  # a backend error of any kind is the result
        state.error = exc


def _hint(step: Step, env: Mapping[str, str], backend: str) -> str:
    if step == Step.INIT:
        return (
            "the ranks reached the store but not each other: set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the"
            " interface the nodes share (`rankscope net ifaces`), and check that this node's name does not"
            " resolve to 127.x on a multi-node run"
        )
    if step in (Step.ALL_REDUCE, Step.BARRIER):
        return (
            f"a rank stopped answering in {step}: see which ranks failed or hung in rank 0's summary;"
            f" rerun with {'NCCL_DEBUG=INFO' if backend == 'nccl' else 'TORCH_CPP_LOG_LEVEL=INFO'}"
        )
    if step == Step.CHECK:
        return "a device or link corrupts data: run `rankscope gpu-test --isolate` on this node"
    return ""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


@dataclass
class _Rank:
    """One rank's run of the test: what it knows of itself, and how it ends early."""

    options: GpuTestOptions
    env: Mapping[str, str]
    on_result: Callable[[RankResult], None]
    ident: RankId
    base: RankResult
    start: float
    world: int
    local: int
    #: Set once torch is imported (the clock starts then).
    deadline: float = 0.0

    def failed(self, step: Step, reason: str, fix: str = "") -> RankResult:
        return replace(self.base, step=step, reason=reason, fix=fix, elapsed=time.monotonic() - self.start)

    def early(self, result: RankResult) -> RankRun:
        """Ended before the store could take the result: only this rank's own line tells it."""
        self.on_result(result)
        return RankRun(result)

    def remaining(self) -> float:
        return max(0.5, self.deadline - time.monotonic())


def _begin(options: GpuTestOptions, env: Mapping[str, str], on_result: Callable[[RankResult], None]) -> _Rank:
    """This rank's identity from its launcher's environment, its CPUs and NUMA node."""
    start = time.monotonic()
    ident = current_rank()
    rank = ident.rank if ident.rank is not None else 0
    world = ident.world_size if ident.world_size is not None else 1
    local = ident.local_rank if ident.local_rank is not None else 0
    cpus, numa = cpu_affinity()
    base = RankResult(
        host=ident.host, rank=rank, step=Step.CONFIG, local_rank=local, world_size=world, cpus=cpus, numa=numa
    )
    return _Rank(options, env, on_result, ident, base, start, world, local)


def _take_gpu(run: _Rank, torch: Any, slot: int) -> tuple[str, Optional[RankResult]]:
    """This rank's GPU set as its device (its identity for the duplicate check), or why it has none."""
    base, local = run.base, run.local
    if not torch.cuda.is_available():
        return "", run.failed(
            Step.TORCH,
            "backend nccl asked for, but CUDA is not available here",
            "use --backend gloo, or install a CUDA build of torch on a GPU node",
        )
    count = torch.cuda.device_count()
    # srun --gpus-per-task and similar give each rank one GPU of its own, seen as device 0
    index = local if local < count else 0
    if count == 0 or (local >= count and count != 1):
        return "", run.failed(
            Step.TORCH,
            f"local rank {local} has no GPU: {count} visible here",
            "start at most as many ranks per node as it has GPUs (--nproc-per-node)",
        )
    torch.cuda.set_device(index)
    props = torch.cuda.get_device_properties(index)
    base.device = f"cuda:{index}"
    base.device_name = props.name
    base.capability = f"{props.major}.{props.minor}"
    base.cuda = torch.version.cuda
    base.nccl = ".".join(map(str, torch.cuda.nccl.version()))
    uuid = getattr(props, "uuid", None)
    base.numa = pci_numa_node(props) or base.numa
    return (str(uuid) if uuid else f"cuda{slot}"), None


def _open_store(run: _Rank, dist: Any) -> tuple[Any, Optional[RankResult]]:
    """The rendezvous store under this run's prefix (rank 0 serves it), or why it cannot be reached."""
    env, options = run.env, run.options
    master_addr = env.get("MASTER_ADDR", "127.0.0.1")
    try:
        master_port = int(env.get("MASTER_PORT", "29500"))
    except ValueError:
        return None, run.failed(
            Step.CONFIG,
            f"MASTER_PORT={env.get('MASTER_PORT')} is not a port number",
            "set MASTER_PORT to a free TCP port, the same on every node",
        )
    is_server = run.base.rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    where = f"{master_addr}:{master_port}"
    unreachable = "" if is_server else wait_for_port(master_addr, master_port, run.deadline)
    if unreachable:
        return None, run.failed(
            Step.STORE,
            f"cannot reach the rendezvous store at {where} within {options.timeout:g} s: {unreachable}",
            f"rank 0 is not listening at {where}, or it cannot be reached from here: check MASTER_ADDR and"
            f" MASTER_PORT (the same on every node), that rank 0 started, and that the port is open"
            " between the nodes",
        )
    try:
        root = dist.TCPStore(
            master_addr,
            master_port,
            run.world,
            is_server,
            timedelta(seconds=max(1.0, run.deadline - time.monotonic())),
            wait_for_workers=False,
        )
    except Exception as exc:
        fix = (
            f"check that MASTER_PORT {master_port} is free on this node"
            if is_server
            else "check MASTER_ADDR and MASTER_PORT (the same on every node) and that rank 0 started"
        )
        return None, run.failed(
            Step.STORE, f"cannot reach the rendezvous store at {where}: {_one_line(exc)}", fix
        )
    run_id = f"{env.get('TORCHELASTIC_RUN_ID', 'none')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return dist.PrefixStore(f"rankscope.gputest/{run_id}/", root), None


def _arrive(run: _Rank, store: Any, slot_id: str, backend: str) -> Optional[RankResult]:
    """Announce this rank and its device, wait for every rank; the ranks that never came, or two
    NCCL ranks of this node on one device, are the failure."""
    rank, world = run.base.rank, run.world
    store.set(f"arrived/{rank}", json.dumps(to_json(DeviceSlot(run.ident.host, rank, slot_id))))
    try:
        store.wait([f"arrived/{r}" for r in range(world)], timedelta(seconds=run.remaining()))
    except Exception:
        joined = [r for r in range(world) if store.check([f"arrived/{r}"])]
        missing = sorted(set(range(world)) - set(joined))
        return run.failed(
            Step.ARRIVE,
            f"{RankSet.of(missing).phrase()} never reached the store in {run.options.timeout:g} s",
            "start every rank (check the launcher on their nodes) and let them reach MASTER_ADDR",
        )
    if backend == "nccl":
        others = [from_json(DeviceSlot, json.loads(store.get(f"arrived/{r}"))) for r in range(world)]
        sharing = [o for o in others if (o.host, o.device) == (run.ident.host, slot_id)]
        for problem in duplicate_devices(sharing):
            return run.failed(Step.CONFIG, problem.what, problem.fix)
    return None


def _test_backend(run: _Rank, torch: Any, dist: Any, store: Any, slot: int) -> tuple[RankResult, bool]:
    """The collectives on a thread this rank waits for until the deadline: the result, and whether
    a backend call never returned."""
    backend, env, timeout = run.base.backend, run.env, run.options.timeout
    state = _Progress()
    worker = threading.Thread(
        target=_collectives,
        args=(torch, dist, state, dist.PrefixStore("pg/", store), run.base, slot, run.remaining(), env),
        name="rankscope-gputest",
        daemon=True,
    )
    worker.start()
    worker.join(run.remaining())
    if worker.is_alive():
        hint = _hint(state.step, env, backend)
        return run.failed(
            state.step, f"no answer from the backend within {timeout:g} s in {state.step}", hint
        ), True
    if state.error is not None:
        return run.failed(state.step, _one_line(state.error), _hint(state.step, env, backend)), False
    if state.wrong:
        return run.failed(Step.CHECK, state.wrong, _hint(Step.CHECK, env, backend)), False
    return replace(run.base, step=Step.OK, elapsed=time.monotonic() - run.start), False


def run_rank(
    options: GpuTestOptions,
    env: Optional[Mapping[str, str]] = None,
    on_result: Callable[[RankResult], None] = lambda _: None,
) -> RankRun:
    """The whole test in this rank. Never hangs past ``options.timeout`` (plus a few seconds for rank 0).

    ``on_result`` hears this rank's own result before rank 0 can summarise it (so its line comes first).
    """
    run = _begin(options, os.environ if env is None else env, on_result)
    # A mistake that shows without torch ends the rank before it pays seconds for importing it.
    problems = preflight(run.env, options.backend or "")
    if problems:
        return run.early(run.failed(Step.CONFIG, problems[0].what, problems[0].fix))
    torch = require_torch()
    dist: Any = importlib.import_module("torch.distributed")  # typed loosely: its stores are not re-exported
    run.deadline = time.monotonic() + options.timeout  # the clock starts once torch is imported
    base = run.base
    backend = base.backend = options.backend or default_backend(torch)
    base.torch = torch.__version__.split("+")[0]
    problems = [] if options.backend else hostname_problems(run.env, backend)
    if problems:
        return run.early(run.failed(Step.CONFIG, problems[0].what, problems[0].fix))
    slots = local_slots(run.env)
    local = run.local
    slot = slots[local] if slots and local < len(slots) else local
    slot_id = f"slot{slot}"
    # gloo moves CUDA tensors too: on a GPU node every backend tests the rank's GPU
    if backend == "nccl" or torch.cuda.is_available():
        slot_id, failure = _take_gpu(run, torch, slot)
        if failure is not None:
            return run.early(failure)
    else:
        base.device = "cpu"
    device_label = base.device + (f" (slot {slot})" if base.device == "cpu" and slots else "")
    store, failure = _open_store(run, dist)
    if failure is not None:
        return run.early(failure)
    world = run.world
    failure = _arrive(run, store, slot_id, backend)
    if failure is not None:
        return _finish(on_result, store, failure, world, backend, options, run.deadline)
    result, hung = _test_backend(run, torch, dist, store, slot)
    if not hung:
        result.device = device_label if result.ok else result.device
    ended = _finish(on_result, store, result, world, backend, options, run.deadline)
    ended.hung = hung
    if result.ok:
        dist.destroy_process_group()
    return ended


def _expand(nodelist: str) -> list[str]:
    from rankscope.cluster.targets import expand_nodeset

    return expand_nodeset(nodelist)


def _hosts(store: Any, world: int, results: Mapping[int, RankResult], joined: list[int]) -> dict[int, str]:
    """Where the ranks without a result run: their arrival record, else the launcher's layout."""
    missing = [r for r in range(world) if r not in results]
    if not missing:
        return {}
    hosts = slurm_task_hosts(os.environ, _expand)
    for rank in missing:
        if rank in joined:
            with contextlib.suppress(Exception):
                hosts[rank] = from_json(DeviceSlot, json.loads(store.get(f"arrived/{rank}"))).host
    return hosts


RESULT_GRACE = 3.0  # rank 0 waits this long past the deadline for ranks that report their own timeout


def _finish(
    on_result: Callable[[RankResult], None],
    store: Any,
    result: RankResult,
    world: int,
    backend: str,
    options: GpuTestOptions,
    deadline: float,
) -> RankRun:
    """Post this rank's result; rank 0 gathers everyone's and sets `done`, the others wait for it."""
    on_result(result)
    store.set(f"result/{result.rank}", json.dumps(to_json(result)))
    if result.rank != 0:
        # rank 0 may be gone; this rank's own line already says what it saw
        with contextlib.suppress(Exception):
            store.wait(["done"], timedelta(seconds=max(1.0, deadline + RESULT_GRACE + 2 - time.monotonic())))
        return RankRun(result)
    results: dict[int, RankResult] = {}
    until = deadline + RESULT_GRACE
    while True:
        for r in range(world):
            if r not in results and store.check([f"result/{r}"]):
                results[r] = from_json(RankResult, json.loads(store.get(f"result/{r}")))
        if len(results) == world or time.monotonic() > until:
            break
        time.sleep(0.05)
    joined = [r for r in range(world) if store.check([f"arrived/{r}"])]
    summary = summarise(world, backend, list(results.values()), joined, _hosts(store, world, results, joined))
    store.set("done", "1")
    return RankRun(result, summary)

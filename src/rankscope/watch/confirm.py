"""Is a quiet job stalled? Two non-blocking py-spy samples of every rank, ``gap`` seconds apart.

``py-spy dump --nonblocking`` reads the process's memory without stopping it (no ptrace stop), so a
rank that is only slow is never paused by the watcher. A rank py-spy cannot sample (ptrace refused,
no py-spy) is asked through its in-process handler when it runs one (``RANKSCOPE_INPROC=1``). A stall is confirmed when every rank that
could be sampled twice shows the same main-thread stack both times, or when the ranks whose stack
stood still all wait in a torch.distributed call (its ``distributed_c10d.py`` frames) while those
whose stack moved are in none (one rank loops in Python while the others wait for it: a real job's
stall was denied for ever by that rank's moving stack); denied when any other rank's stack moved;
unknown when no rank could be sampled (no py-spy, refused): the capture then decides.

Beside the stacks, each rank's main-thread CPU time is read before the first sample and after the
second (``/proc/PID/task/PID/stat``): a confirmed stall whose every rank ran on the CPU throughout
(:attr:`Confirmation.busy`) may be a long step computing in one native call (the same line both
times), or a wait that spins (a GPU synchronize); the capture tells them apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from rankscope import lifetime, procfs
from rankscope.model import Frame
from rankscope.stacks.pyspy import parse_dump
from rankscope.stacks.pyspy_cmd import find_pyspy, pyspy_env

#: Seconds one non-blocking sample may take.
SAMPLE_TIMEOUT = 10.0
#: The share of one core a rank's main thread used between the samples from which it is on the CPU
#: (a rank waiting in a collective, a sleep or a lock uses next to none).
BUSY_SHARE = 0.1


@dataclass(frozen=True)
class Confirmation:
    #: True: every sampled rank sits still; False: some rank's stack moved; None: nothing sampled.
    stalled: Optional[bool]
    text: str
    #: A confirmed stall whose every sampled rank's main thread ran on the CPU between the samples.
    busy: bool = False
    #: The sampled ranks (pids) whose main thread ran on the CPU between the samples.
    busy_pids: tuple[int, ...] = ()


def main_thread_cpu(pid: int) -> Optional[float]:
    """CPU seconds (user and system) the process's main thread has used; None when unreadable."""
    return procfs.thread_cpu(pid, pid)


def _sample(pyspy: str, pids: list[int], stop_fd: int) -> dict[int, tuple[Frame, ...]]:
    env = pyspy_env()
    children = {
        pid: lifetime.start(
            [pyspy, "dump", "--nonblocking", "--pid", str(pid), "--json"],
            SAMPLE_TIMEOUT,
            env=env,
            stderr=None,
        )
        for pid in pids
    }
    lifetime.wait(list(children.values()), stop_fd)
    stacks: dict[int, tuple[Frame, ...]] = {}
    for pid, child in children.items():
        if child.returncode is None:
            child.end()  # a stop came first
        if child.returncode != 0:
            continue
        try:
            threads = parse_dump(child.output.bytes() if child.output else b"", pid)
        except ValueError:
            continue
        main = next((t for t in threads if t.is_main), None)
        if main is not None:
            stacks[pid] = main.frames
    return stacks


def without_current_thread(text: str) -> str:
    """A handler's stacks text without the block of the thread that wrote it (the handler's own)."""
    blocks = text.split("\n\n")
    return "\n\n".join(block for block in blocks if not block.startswith("Current thread"))


def sample_inproc(pids: list[int]) -> dict[int, str]:
    """Every thread's stack but the handler's own, from the ranks' in-process handlers (started with
    RANKSCOPE_INPROC=1): a request their own thread answers, no ptrace, no signal."""
    from rankscope.model import RankId
    from rankscope.ranks import short_hostname
    from rankscope.stacks.collect import Target
    from rankscope.stacks.inproc_request import request_all

    host = short_hostname()
    targets = [Target(pid, RankId(host)) for pid in pids]
    stacks: dict[int, str] = {}
    for answer in request_all(targets, "stacks", time.monotonic() + SAMPLE_TIMEOUT, host):
        result = answer.result
        if isinstance(result, dict) and isinstance(result.get("text"), str):
            stacks[answer.target.pid] = without_current_thread(result["text"])
    return stacks


def _both(pyspy: Optional[str], pids: list[int], stop_fd: int) -> dict[int, object]:
    """py-spy's samples, and the handlers' for the ranks py-spy could not sample (refused, missing)."""
    found: dict[int, object] = dict(_sample(pyspy, pids, stop_fd)) if pyspy else {}
    rest = [pid for pid in pids if pid not in found]
    if rest:
        found.update(sample_inproc(rest))
    return found


def confirm_stall(pids: list[int], gap: float = 1.0, stop_fd: int = -1) -> Confirmation:
    try:
        pyspy: Optional[str] = find_pyspy()
    except Exception:  # noqa: BLE001 - MissingToolError: the handlers may still answer
        pyspy = None
    cpu = {pid: main_thread_cpu(pid) for pid in pids}
    began = time.monotonic()
    first = _both(pyspy, pids, stop_fd)
    if not first:
        return Confirmation(None, "no rank could be sampled: not confirmed by stacks")
    time.sleep(gap)
    second = _both(pyspy, list(first), stop_fd)
    both = [pid for pid in first if pid in second and type(first[pid]) is type(second[pid])]
    moved = [pid for pid in both if first[pid] != second[pid]]
    still = [pid for pid in both if pid not in moved]
    waiting = bool(still) and all(_in_collective(first[pid]) for pid in still)
    elsewhere = not any(_in_collective(first[pid]) or _in_collective(second[pid]) for pid in moved)
    if moved and waiting and elsewhere:
        # the others wait for these ranks, which run elsewhere: a stall the capture explains
        shares = _shares(cpu, moved, time.monotonic() - began)
        busy = tuple(pid for pid, share in shares.items() if share >= BUSY_SHARE)
        text = (
            f"{len(still)} rank(s) unchanged in a collective over {gap:g} s while the stacks of pids "
            f"{', '.join(map(str, moved))} moved elsewhere"
        )
        return Confirmation(True, text, busy_pids=busy)
    if moved:
        return Confirmation(False, f"stacks of pids {', '.join(map(str, moved))} moved")
    if not both:
        return Confirmation(None, "no rank could be sampled twice: not confirmed by stacks")
    text = f"{len(both)} rank(s) unchanged over {gap:g} s"
    shares = _shares(cpu, both, time.monotonic() - began)
    busy = tuple(pid for pid, share in shares.items() if share >= BUSY_SHARE)
    if len(busy) == len(both):
        text += f", every one on the CPU ({min(shares.values()):.0%} of a core or more)"
        return Confirmation(True, text, busy=True, busy_pids=busy)
    return Confirmation(True, text, busy_pids=busy)


def _in_collective(sample: object) -> bool:
    """A py-spy sample of a main thread inside a torch.distributed call (a collective, a barrier, a
    wait): one of its frames is in ``distributed_c10d.py``. A handler's text sample says nothing."""
    return isinstance(sample, tuple) and any(
        isinstance(frame, Frame) and frame.filename.endswith("distributed_c10d.py") for frame in sample
    )


def _shares(before: dict[int, Optional[float]], pids: list[int], seconds: float) -> dict[int, float]:
    """The share of one core each rank's main thread used since ``before`` (ranks unreadable left out)."""
    shares = {}
    for pid in pids:
        then, now = before.get(pid), main_thread_cpu(pid)
        if then is not None and now is not None and seconds > 0:
            shares[pid] = (now - then) / seconds
    return shares

"""No rate or timing of stack requests crashes the process (measured before: a process starting and
joining threads died of SIGSEGV in 4 of 4 runs under repeated requests, a DataLoader job in 3 of 3,
leaving a worker behind).

Real processes with RANKSCOPE_INPROC=1, hammered at once by several `rankscope stacks --via-signal
--samples 10` runs and by raw requests written into the handler's FIFO about a thousand times a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rankscope.inproc import runtime

pytestmark = pytest.mark.slow

CHURN = """
import os, sys, threading, rankscope
def short():
    sum(range(200))
stop = sys.argv[1]
made = 0
print("up", flush=True)
while not os.path.exists(stop):
    batch = [threading.Thread(target=short) for _ in range(8)]
    for thread in batch:
        thread.start()
    for thread in batch:
        thread.join()
    made += len(batch)
    rankscope.progress(step=made)
print("made", made, flush=True)
"""

LOADER = """
import os, sys, time, rankscope, torch
from torch.utils.data import DataLoader, Dataset
class Numbers(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, index):
        time.sleep(0.001)
        return torch.tensor([index])
stop = sys.argv[1]
print("up", flush=True)
epochs = 0
while not os.path.exists(stop):
    for step, batch in enumerate(DataLoader(Numbers(), batch_size=4, num_workers=2)):
        rankscope.progress(step=step)
    epochs += 1
print("epochs", epochs, flush=True)
"""

CLI_RUNS = 3


def _start(code: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "RANKSCOPE_INPROC": "1", runtime.ENV_DIR: str(tmp_path / "rt"), "RANK": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "stop")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _flood(directory: Path, pid: int, until: threading.Event) -> int:
    """Raw stack requests, about a thousand a second, in the handler's own protocol (protocol 1: its
    signal, as its rankscope sent it; 2: a request line in its FIFO); how many were sent."""
    info = json.loads(Path(runtime.files_of(str(directory), pid)["inproc"]).read_text())
    fifo = directory / f"{info['base']}.req"
    sent = 0
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while not until.is_set():
            if info.get("version", 1) < 2:
                os.kill(pid, info["signal"])
                sent += 1
            else:
                # A few ids over and over: the replies nobody reads replace each other.
                line = json.dumps({"v": 2, "id": f"f{sent % 8:x}", "kind": "stacks"}).encode() + b"\n"
                with contextlib.suppress(BlockingIOError):  # its queue is full: it takes them at its pace
                    os.write(fd, line)
                    sent += 1
            time.sleep(0.001)  # the runs' own requests still get in
    finally:
        os.close(fd)
    return sent


def _hammer(proc: subprocess.Popen[str], directory: Path, watch: threading.Event | None = None) -> int:
    """Several `rankscope stacks --via-signal --samples 10` at once, and the raw flood meanwhile."""
    until = threading.Event()
    counted: list[int] = []
    flooder = threading.Thread(target=lambda: counted.append(_flood(directory, proc.pid, until)))
    flooder.start()
    argv = [sys.executable, "-m", "rankscope", "stacks", "--pid", str(proc.pid), "--via-signal"]
    argv += ["--samples", "10", "--interval", "0.05", "--json", "--no-fr"]
    runs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(CLI_RUNS)
    ]
    try:
        results = [run.communicate(timeout=240) for run in runs]
    finally:
        until.set()
        flooder.join()
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert proc.poll() is None, f"the job died (exit status {proc.returncode})"
    for run, (out, err) in zip(runs, results):
        assert run.returncode == 0, err
        document = json.loads(out)
        assert document["processes"][0]["dumped"] is True
    assert counted and counted[0] > 0
    return counted[0]


def _hammer_then_stop(proc: subprocess.Popen[str], tmp_path: Path) -> str:
    """Hammer it, then let it end by itself; its output. It must have exited 0 (not by a signal)."""
    try:
        _hammer(proc, tmp_path / "rt")
        (tmp_path / "stop").touch()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0
    return out


def test_thread_churn_survives_concurrent_requests(tmp_path: Path) -> None:
    out = _hammer_then_stop(_start(CHURN, tmp_path), tmp_path)
    assert int(out.split()[-1]) > 0  # threads it made meanwhile


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found.update(int(c) for c in (task / "children").read_text().split())
    return found


def test_dataloader_job_survives_a_flood_and_leaves_no_worker(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = _start(LOADER, tmp_path)
    workers: set[int] = set()
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            workers.update(_children(proc.pid))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out = _hammer_then_stop(proc, tmp_path)
    finally:
        watching.set()
        watcher.join()
    assert int(out.split()[-1]) > 0  # epochs it ran meanwhile
    assert workers  # it really forked workers meanwhile
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.1)
    assert [w for w in workers if Path(f"/proc/{w}").exists()] == []

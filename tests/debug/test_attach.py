"""`rankscope attach` to a rank stopped with no terminal: a real 2-rank torchrun job (gloo), started
without a terminal as srun or a background launcher would, showing rank 0's output alone
(--local-ranks-filter=0: rank 0 repeats rank 1's attach line); the client typed at through a terminal.
Who may attach (another user may not) is tested in test_shared_node.py."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Callable

import pytest
from tests.debug.conftest import Terminal, job_argv, job_env
from tests.support.cli import run_cli

from rankscope.demo.launch import kill_tree

PROMPT = "(Pdb rank 1) "
#: The line rank 0 repeats for rank 1, whose own output torchrun's --local-ranks-filter=0 hides.
ATTACH_LINE = re.compile(
    r"rankscope: rank 0 waits; rank 1 \(pid (\d+) on (\S+)\) is stopped in pdb with no terminal; "
    r"attach on (\S+) with: rankscope attach --pid (\d+)\n"
)


@pytest.fixture
def job_without_terminal() -> Iterator[subprocess.Popen[bytes]]:
    job = subprocess.Popen(
        job_argv(launcher=("--local-ranks-filter=0",)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=job_env(),
        start_new_session=True,
    )
    yield job
    kill_tree(job, grace=1.0)  # torchrun's group and each worker's session


def _read_until(stream: int, pattern: re.Pattern[str], timeout: float = 90) -> re.Match[str]:
    seen = ""
    deadline = time.monotonic() + timeout
    while (found := pattern.search(seen)) is None:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(stream, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"no attach line; stderr so far:\n{seen}")
        seen += chunk.decode("utf-8", "replace")
    return found


def test_attach_by_pid_drives_pdb_one_client_at_a_time_and_detaches(
    job_without_terminal: subprocess.Popen[bytes], terminal: Callable[..., Terminal]
) -> None:
    job = job_without_terminal
    assert job.stderr is not None and job.stdout is not None
    pid, node, attach_node, attach_pid = _read_until(job.stderr.fileno(), ATTACH_LINE).groups()
    assert (attach_node, attach_pid) == (node, pid)  # no secret in the line, nor in the store it came through

    client = terminal([sys.executable, "-m", "rankscope", "attach", "--pid", pid], job_env())
    assert "-> value = torch.tensor([rank + 1])" in client.expect(PROMPT)
    client.send("p rank")
    assert client.expect(PROMPT).split("\n")[1] == "1"
    client.send("n")
    assert "-> dist.all_reduce(value)" in client.expect(PROMPT)
    second = run_cli("attach", "--pid", pid, "--timeout", "1", timeout=60)
    assert second.returncode == 5, second.stderr  # one client at a time
    assert f"process {pid} did not answer within 1 s" in second.stderr
    assert select.select([job.stdout], [], [], 0)[0] == [], "rank 0 went on while rank 1 was in pdb"
    client.send_eof()
    assert client.wait(30) == 0, client.seen
    assert "detached from rank 1" in client.seen

    out, _ = job.communicate(timeout=60)
    assert job.returncode == 0
    assert out.decode().splitlines() == ["rank 0 done, sum=3"]  # rank 1's output: filtered


def test_attach_pid_without_a_breakpoint_needs_python_314() -> None:
    # A Python process with no rankscope breakpoint: --pid means PEP 768, which Python 3.11 lacks.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        too_old = run_cli("attach", "--pid", str(worker.pid), timeout=60)
        assert too_old.returncode == 6
        assert (
            f"process {worker.pid} runs Python 3.11: attaching pdb to a running process needs Python 3.14"
            in too_old.stderr
        )
    finally:
        kill_tree(worker, grace=1.0)


def test_attach_to_nothing_or_a_bad_address() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed when the block ends: nothing listens there
    refused = run_cli("attach", f"127.0.0.1:{port}", "--token", "t")
    assert refused.returncode == 5
    assert f"nothing listens on 127.0.0.1:{port}" in refused.stderr
    assert run_cli("attach", "no-port-here", "--token", "t").returncode == 8
    assert run_cli("attach", "--pid", "999999999").returncode == 8
    assert run_cli("attach").returncode == 2
    assert run_cli("attach", f"127.0.0.1:{port}").returncode == 2  # TCP needs its token file

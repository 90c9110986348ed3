"""Pipes: who holds the other end (`fds --peers`; `strace` names the writer a reader waits for)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.support.cli import run_cli


@pytest.fixture
def pipeline() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """``sleep 60 | python -c 'read stdin'``: the reader waits on a writer that never writes."""
    writer = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, start_new_session=True)
    assert writer.stdout is not None
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('ready', flush=True, file=sys.stderr); sys.stdin.read()"],
        stdin=writer.stdout,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    writer.stdout.close()  # only the two processes hold the pipe
    try:
        assert reader.stderr is not None and reader.stderr.readline() == b"ready\n"
        yield writer, reader
    finally:
        for process in (writer, reader):
            process.kill()
            process.wait()


def test_peers_names_the_process_at_the_other_end_of_a_pipe(
    pipeline: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    writer, reader = pipeline
    result = run_cli("fds", str(writer.pid), "--peers", "--json")
    assert result.returncode == 0, result.stderr
    (stdout,) = [fd for fd in result.json()["processes"][0]["fds"] if fd["fd"] == 1]
    assert stdout["kind"] == "pipe"
    (holder,) = stdout["holders"]
    assert holder.startswith(f"pid {reader.pid} (python") and holder.endswith(") fd 0")
    # Without --peers nothing else on the node is read.
    (plain,) = [
        fd for fd in run_cli("fds", str(writer.pid), "--json").json()["processes"][0]["fds"] if fd["fd"] == 1
    ]
    assert plain["holders"] == []


@pytest.mark.needs("strace")
def test_a_reader_blocked_on_a_pipe_is_told_who_holds_the_write_end(
    pipeline: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    writer, reader = pipeline
    result = run_cli("strace", str(reader.pid), "--seconds", "0.5", "--json")
    assert result.returncode == 0, result.stderr
    (blocked,) = result.json()["processes"][0]["blocked"]
    assert blocked["syscall"] == "read"
    assert blocked["on"].startswith("fd 0: pipe:[") and f"pid {writer.pid} (sleep) fd 1" in blocked["on"]

"""`rankscope prefix -- CMD` on its own, under torchrun --no-python, and under mpirun."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import run_torchrun
from tests.support.leftovers import gone_within, kill_recorded
from tests.support.system import ensure_commands

from rankscope.ranks import short_hostname

HOST = short_hostname()
RANKSCOPE = str(Path(sys.executable).with_name("rankscope"))
EMIT = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
#: Under torchrun every rank must succeed: the first failing rank makes torchrun kill the others.
EMIT_OK = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"


def test_prefix_passes_exit_code_and_keeps_streams_apart() -> None:
    env = {**os.environ, "RANK": "4"}
    result = run_cli("prefix", "--", sys.executable, "-c", EMIT, env=env)
    assert result.returncode == 3
    assert result.stdout == f"[{HOST}:4] to stdout\n"
    assert result.stderr == f"[{HOST}:4] to stderr\n"


def test_prefix_short_host_and_signal_exit_code() -> None:
    env = {**os.environ, "SLURM_PROCID": "9", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu-node-042"}
    code = "import os, signal; print('x', flush=True); os.kill(os.getpid(), signal.SIGTERM)"
    result = run_cli("prefix", "--short-host", "--", sys.executable, "-c", code, env=env)
    assert result.stdout == "[042:9] x\n"
    assert result.returncode == 128 + 15


def test_prefix_missing_command_is_one_line_error() -> None:
    result = run_cli("prefix", "--", "/nonexistent/cmd")
    assert result.returncode == 6
    assert result.stderr.count("\n") == 1 and "rankscope: error: /nonexistent/cmd not found" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_prefix_under_torchrun_no_python(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    argv = ["prefix", "--", sys.executable, "-c", EMIT_OK]
    code = run_torchrun(
        tmp_path, log, *argv, script=Path(RANKSCOPE), timeout=180, nproc=4, torchrun_args=["--no-python"]
    )
    text = log.read_text()
    assert code == 0, text
    for rank in range(4):
        assert f"[{HOST}:{rank}] to stdout" in text
        assert f"[{HOST}:{rank}] to stderr" in text
    data = run_cli("logs", "ranks", str(log), "--json").json()
    assert [r["label"] for r in data["ranks"]] == [f"{HOST}:{r}" for r in range(4)]


def _mpirun(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    ensure_commands({"mpirun": "openmpi-bin"})
    mpirun = shutil.which("mpirun")
    assert mpirun
    return subprocess.run(
        [mpirun, "--allow-run-as-root", "--oversubscribe", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.needs("openmpi")
def test_prefix_under_mpirun() -> None:
    result = _mpirun(["-np", "4", RANKSCOPE, "prefix", "--", sys.executable, "-c", "print('hello')"])
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"[{HOST}:{r}] hello" for r in range(4)]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.needs("openmpi")
def test_real_mpirun_tag_output_is_read(tmp_path: Path) -> None:
    """Real `mpirun --tag-output` output: 4 ranks, rank 2 raises a different error."""
    code = (
        "import atexit, os, time\n"
        "atexit.register(time.sleep, 2)  # every rank prints its traceback before mpirun aborts the job\n"
        "r = int(os.environ['OMPI_COMM_WORLD_RANK'])\n"
        "print(f'step 1 on {r}', flush=True)\n"
        "if r == 2:\n    raise KeyError(f'missing shard {r}')\n"
        "raise OSError(f'disk quota exceeded writing ckpt-{r}.pt')\n"
    )
    result = _mpirun(["--tag-output", "-np", "4", sys.executable, "-c", code])
    log = tmp_path / "mpi.log"
    log.write_text(result.stdout + result.stderr)
    assert "[1,2]<stderr>:" in log.read_text()
    data = run_cli("logs", "errors", str(log), "--json").json()
    groups = [(g["exception_type"], g["ranks"]) for g in data["groups"]]
    assert groups == [("OSError", "0-1,3"), ("KeyError", "2")]
    ranks = run_cli("logs", "ranks", str(log), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == ["0", "1", "2", "3"]
    lines = run_cli("logs", "grep", "--rank", "2", str(log)).stdout.splitlines()
    assert lines[0] == "step 1 on 2" and lines[-1] == "KeyError: 'missing shard 2'"


def test_prefix_into_a_closed_pipe_ends_the_command() -> None:
    """`rankscope prefix -- endless | head -3`: the command must end, not block forever."""
    env = {**os.environ, "RANK": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "prefix", "--", sys.executable, "-c", "while True: print('y')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        proc.wait(30)
    finally:
        proc.kill()
        proc.wait()
    assert first == [f"[{HOST}:0] y\n".encode()] * 3
    err = proc.stderr.read() if proc.stderr else b""
    # The child met the closed pipe exactly as under `| head` (Python reports BrokenPipeError);
    # rankscope itself printed nothing of its own.
    assert b"BrokenPipeError" in err
    assert b"rankscope" not in err


def _start_prefix(tmp_path: Path, script: str) -> subprocess.Popen[bytes]:
    """`rankscope prefix -- bash -c SCRIPT` in a session of its own (killed as a group in teardown)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rankscope", "prefix", "--", "bash", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "RANK": "0"},
        start_new_session=True,
        cwd=tmp_path,
    )


def _read_pid(path: Path, seconds: float = 20.0) -> int:
    end = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)
    return int(path.read_text())


@pytest.mark.timeout(60)
def test_sigterm_to_prefix_reaches_the_grandchild(tmp_path: Path) -> None:
    # bash does not exec its last command here: python is prefix's grandchild. SIGTERM used to
    # reach bash alone; python ran on with ppid 1 and kept prefix reading its pipe.
    pid_file = tmp_path / "grandchild.pid"
    grandchild = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    proc = _start_prefix(tmp_path, f"{shlex.quote(sys.executable)} -c {shlex.quote(grandchild)}; echo after")
    pid = 0
    try:
        pid = _read_pid(pid_file)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=20)
        assert proc.returncode == 128 + signal.SIGTERM
        assert b"after" not in stdout
        assert gone_within(pid, 5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if pid:
            kill_recorded(pid_file)


@pytest.mark.timeout(60)
def test_a_leftover_holding_the_output_does_not_hold_prefix(tmp_path: Path) -> None:
    # The command exits; what it started (ignoring SIGTERM) still holds stdout. prefix ends it
    # and returns the command's status instead of waiting for the pipe to close.
    pid_file = tmp_path / "leftover.pid"
    proc = _start_prefix(
        tmp_path, f"(trap '' TERM; echo $BASHPID > {pid_file}; sleep 120; :) & echo started; exit 3"
    )
    pid = 0
    try:
        stdout, _ = proc.communicate(timeout=20)  # the leftover alone would keep it 120 s
        pid = _read_pid(pid_file)
        assert proc.returncode == 3
        assert stdout == f"[{HOST}:0] started\n".encode()
        assert gone_within(pid, 5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if pid:
            kill_recorded(pid_file)


def test_the_piece_size_is_the_logs_readers_cut() -> None:
    from rankscope.logs.sources import MAX_LINE
    from rankscope.passthrough import PIECE

    assert PIECE == MAX_LINE


#: Runs prefix over a 50 MB line without a newline (head and tr use little memory) and prints
#: the peak RSS of the largest process it waited for, in KiB: prefix itself.
PEAK_RSS = """
import resource, subprocess, sys
line = "head -c 50000000 /dev/zero | tr '\\\\0' x; echo; echo end"
with open(sys.argv[1], "wb") as out:
    subprocess.run([sys.executable, "-m", "rankscope", "prefix", "--", "sh", "-c", line], stdout=out, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.timeout(120)
def test_a_long_line_is_written_in_pieces_with_bounded_memory(tmp_path: Path) -> None:
    from rankscope.passthrough import PIECE

    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "RANK": "5"},
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    peak_mib = int(result.stdout) / 1024
    # Measured: 31 MiB (Python and click, plus one 4 MiB piece); 112 MiB when the line was kept whole.
    assert peak_mib < 64, peak_mib
    prefix = f"[{HOST}:5] ".encode()
    with open(out, "rb") as lines:
        sizes = []
        for line in lines:
            assert line.startswith(prefix)
            sizes.append(len(line) - len(prefix))
    full, rest = divmod(50_000_000, PIECE)
    # Every piece is a line of its own, with the prefix; then the rest, then the next line.
    assert sizes == [PIECE + 1] * full + [rest + 1, len("end\n")]

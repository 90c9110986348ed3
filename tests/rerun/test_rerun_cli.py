"""`rankscope rerun`: real programs rerun on CPU (this machine has no GPU) and with CUDA_LAUNCH_BLOCKING=1.

The comparison is made against the asynchronous CUDA error recorded on an H100 node
(tests/data/gpu-h100/cuda_assert.log: rank 1 indexes out of range in embed(), line 4; the
traceback points at loss_of(), line 6); the rerun is a small torch program of the same shape,
which on CPU raises IndexError in embed() at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli

from rankscope.rerun.collect import no_cuda_device
from rankscope.rerun.compare import Agreement

ASYNC_LOG = Path(__file__).resolve().parents[1] / "data" / "gpu-h100" / "cuda_assert.log"

#: The recorded job's shape: embed() is line 4 and loss_of() line 6, as in cuda_assert.py.
TORCH_JOB = """\
import torch

def embed(table, ids):
    return table[ids]
def loss_of(e):
    return e.float().pow(2).mean()


def main():
    table = torch.zeros(100, 64)
    e = embed(table, torch.tensor([1, 1000]))
    loss_of(e)


main()
"""

#: A program that fails inside the standard library, called from its own parse_config().
PLAIN_JOB = """\
import json
import os

print("CUDA_VISIBLE_DEVICES=" + repr(os.environ.get("CUDA_VISIBLE_DEVICES")), flush=True)
print("CUDA_LAUNCH_BLOCKING=" + repr(os.environ.get("CUDA_LAUNCH_BLOCKING")), flush=True)


def parse_config(text):
    return json.loads(text)


parse_config("{not json")
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_cpu_rerun_hides_the_gpus_and_names_the_users_frame(tmp_path: Path) -> None:
    job = _write(tmp_path, "job.py", PLAIN_JOB)
    result = run_cli("rerun", "--cpu", "--", sys.executable, str(job))
    assert result.returncode == 1, result.stderr
    assert "CUDA_VISIBLE_DEVICES=''" in result.stdout  # the child saw it empty
    assert "CUDA_LAUNCH_BLOCKING=None" in result.stdout
    assert "json.decoder.JSONDecodeError" in result.stderr  # its traceback passed through
    # the innermost frame is in the standard library's json; the user's is parse_config
    assert f"in your code: {job}:9 in parse_config" in result.stderr
    assert "return json.loads(text)" in result.stderr


def test_sync_rerun_sets_launch_blocking_and_json_keeps_stdout_for_the_document(tmp_path: Path) -> None:
    job = _write(tmp_path, "job.py", PLAIN_JOB)
    result = run_cli("rerun", "--sync", "--json", "--", sys.executable, str(job))
    assert result.returncode == 1, result.stderr
    assert "CUDA_LAUNCH_BLOCKING='1'" in result.stderr  # the command's stdout went to stderr
    assert "CUDA_VISIBLE_DEVICES=None" in result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.rerun/1"
    assert document["command"] == [sys.executable, str(job)]
    assert document["environment"] == {"CUDA_LAUNCH_BLOCKING": "1"}
    assert document["exit_code"] == 1
    assert document["timed_out"] is False
    assert document["error"]["exception"].startswith("json.decoder.JSONDecodeError: Expecting property name")
    assert document["error"]["user_frame"]["function"] == "parse_config"
    assert document["error"]["user_frame"]["line"] == 9
    assert document["comparison"] is None


@pytest.mark.parametrize("hide", ["", "-1"])
def test_sync_says_in_one_line_that_it_changes_nothing_where_no_cuda_device_is_visible(
    tmp_path: Path, hide: str
) -> None:
    job = _write(tmp_path, "job.py", "print('ran')\n")
    result = run_cli(
        "rerun", "--sync", "--", sys.executable, str(job), env={**os.environ, "CUDA_VISIBLE_DEVICES": hide}
    )
    assert result.returncode == 0 and "ran" in result.stdout, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "--sync" in line]
    assert line.startswith("rankscope: warning: --sync changes nothing here: no CUDA device is visible"), line
    assert f"CUDA_VISIBLE_DEVICES={hide!r} hides every GPU" in line
    both = run_cli("rerun", "--sync", "--cpu", "--", sys.executable, str(job))
    assert "changes nothing" not in both.stderr  # --cpu asks for no GPU on purpose


def test_no_cuda_device_names_why() -> None:
    # Whether /dev/nvidia* exists is the argument: this machine has none, a GPU node has them.
    assert no_cuda_device({}, nvidia_devices=True) == ""
    assert no_cuda_device({"CUDA_VISIBLE_DEVICES": "0,1"}, nvidia_devices=True) == ""
    assert "no NVIDIA GPU" in no_cuda_device({}, nvidia_devices=False)
    assert "hides every GPU" in no_cuda_device({"CUDA_VISIBLE_DEVICES": ""}, nvidia_devices=True)


def test_cpu_rerun_against_the_recorded_async_cuda_error(tmp_path: Path) -> None:
    job = _write(tmp_path, "cuda_assert.py", TORCH_JOB)
    result = run_cli(
        "rerun", "--cpu", "--compare", str(ASYNC_LOG), "--", sys.executable, str(job), timeout=300
    )
    assert result.returncode == 1, result.stderr
    assert "IndexError: index 1000 is out of bounds" in result.stderr
    assert f"in your code: {job}:4 in embed" in result.stderr
    assert (
        "the error is raised in embed (line 4), not in loss_of (line 6) where the first run reported it"
        in result.stderr
    )

    as_json = run_cli(
        "rerun", "--cpu", "--json", "--compare", str(ASYNC_LOG), "--", sys.executable, str(job), timeout=300
    )
    comparison = as_json.json()["comparison"]
    assert comparison["verdict"] == Agreement.DIFFERENT.value
    assert comparison["first_run"]["user_frame"]["function"] == "loss_of"
    assert comparison["first_run"]["location_unreliable"] is True
    assert comparison["first_run"]["exception"].startswith("torch.AcceleratorError")


def test_a_rerun_that_passes_says_so_against_the_log(tmp_path: Path) -> None:
    job = _write(tmp_path, "ok.py", "print('fine')\n")
    result = run_cli("rerun", "--cpu", "--compare", str(ASYNC_LOG), "--", sys.executable, str(job))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "fine\n"
    assert "no traceback in the output" in result.stderr
    assert "the rerun left no traceback (exit code 0)" in result.stderr
    assert "loss_of (cuda_assert.py line 6)" in result.stderr


def test_exit_codes_are_the_commands_own(tmp_path: Path) -> None:
    job = _write(tmp_path, "exit3.py", "import sys\nsys.exit(3)\n")
    assert run_cli("rerun", "--cpu", "--", sys.executable, str(job)).returncode == 3
    killed = run_cli(
        "rerun",
        "--cpu",
        "--",
        sys.executable,
        "-c",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    )
    assert killed.returncode == 128 + 9


def test_timeout_ends_the_command(tmp_path: Path) -> None:
    job = _write(tmp_path, "sleeper.py", "import time\nprint('started', flush=True)\ntime.sleep(120)\n")
    result = run_cli("rerun", "--cpu", "--timeout", "2", "--json", "--", sys.executable, str(job))
    assert result.returncode == 124, result.stderr
    document = result.json()
    assert document["timed_out"] is True and document["exit_code"] == 124
    assert "started" in result.stderr


def test_rankscopes_own_errors(tmp_path: Path) -> None:
    missing = run_cli("rerun", "--cpu", "--", "no-such-command-here")
    assert missing.returncode == 6
    assert "no-such-command-here not found" in missing.stderr
    no_mode = run_cli("rerun", "--", sys.executable, "-c", "pass")
    assert no_mode.returncode == 2
    assert "choose --sync" in no_mode.stderr
    no_log = run_cli(
        "rerun", "--cpu", "--compare", str(tmp_path / "nope.log"), "--", sys.executable, "-c", "print('ran')"
    )
    assert no_log.returncode == 8
    assert "ran" not in no_log.stdout  # the log is checked before the command runs


PEER_LOSS_JOB = Path(__file__).resolve().parents[1] / "logs" / "jobs" / "peer_loss_job.py"


def test_a_torchrun_job_names_the_culprit_ranks_frame_not_the_launchers() -> None:
    """Rank 1 raises in read_labels; ranks 0 and 2 lose their peer; torchrun raises ChildFailedError last."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
    torchrun += ["--role", "node:", "--tee", "3", "--monitor-interval", "2", str(PEER_LOSS_JOB)]
    result = run_cli("rerun", "--cpu", "--json", "--timeout", "240", "--", *torchrun, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "ChildFailedError" in result.stderr  # the launcher's traceback came last
    error = result.json()["error"]
    assert error["exception"] == "ValueError: label 1000 out of range for 100 classes on rank 1"
    frame = error["user_frame"]
    assert (frame["filename"], frame["line"], frame["function"]) == (str(PEER_LOSS_JOB), 22, "read_labels")


def test_signals_reach_the_commands_group(tmp_path: Path) -> None:
    job = _write(
        tmp_path,
        "wait.py",
        "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n",
    )
    rerun = subprocess.Popen(
        [sys.executable, "-m", "rankscope", "rerun", "--cpu", "--", sys.executable, str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rerun.stdout is not None
        child = int(rerun.stdout.readline())
        assert os.getpgid(child) == child  # a process group of its own
        rerun.send_signal(signal.SIGTERM)
        _, err = rerun.communicate(timeout=60)
    finally:
        rerun.kill()
        rerun.wait()
    assert rerun.returncode == 128 + signal.SIGTERM, err
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)

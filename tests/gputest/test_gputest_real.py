"""gpu-test and bench allreduce for real: torchrun, gloo, CPU ranks on this node.

A rank that fails its check is made with the test hook RANKSCOPE_GPUTEST_FAIL_DEVICE (the rank on
that device slot corrupts its all_reduce result); everything else is what the backend really does.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import hide_module, run_cli
from tests.support.sshd import free_port

pytestmark = pytest.mark.slow


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME") and k != "MASTER_ADDR"}
    base["OMP_NUM_THREADS"] = "1"
    return {**base, **extra}


def test_three_local_ranks_pass_with_three_ok_lines_and_a_summary() -> None:
    result = run_cli(
        "gpu-test", "--nproc", "3", "--backend", "gloo", "--timeout", "60", env=env(), timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ok_lines = re.findall(r"^\[[^:\]]+:(\d)\] OK gloo cpu; torch \S+; cpus \S+", result.stdout, re.M)
    assert sorted(ok_lines) == ["0", "1", "2"], result.stdout
    assert "gpu-test: all 3 ranks OK (gloo: init, all_reduce checked, barrier)" in result.stdout
    # each rank's line comes before rank 0's summary
    assert result.stdout.rstrip().splitlines()[-1].startswith("gpu-test: all 3 ranks OK")


def test_a_rank_that_fails_its_check_is_named_by_rank_0_and_the_exit_code_says_so() -> None:
    result = run_cli(
        "gpu-test", "--nproc", "2", "--timeout", "60", "--json",
        env=env(RANKSCOPE_GPUTEST_FAIL_DEVICE="1"), timeout=240,
    )  # fmt: skip
    assert result.returncode == 11, result.stdout + result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.gputest/1"
    assert [r["rank"] for r in document["failed"]] == [1]
    assert document["failed"][0]["step"] == "check"
    assert "wrong sum" in document["failed"][0]["reason"]
    assert document["ok"] == [0]
    assert "[" in result.stderr and "FAILED at check" in result.stderr  # the rank's own line


def test_an_interface_variable_naming_no_interface_fails_at_once() -> None:
    result = run_cli("gpu-test", "--nproc", "2", env=env(GLOO_SOCKET_IFNAME="nosuch0"), timeout=60)
    assert result.returncode == 13, result.stdout + result.stderr
    names = [name for _, name in socket.if_nameindex()]
    assert "GLOO_SOCKET_IFNAME=nosuch0" in result.stderr
    assert ", ".join(names) in result.stderr
    assert "Traceback" not in result.stderr


def test_the_same_mistake_under_a_users_launcher_is_caught_before_the_backend() -> None:
    """Each rank checks on its own; torchrun SIGTERMs the others as soon as one rank exits, so on a
    loaded machine a slower rank may be ended before it prints: at least one line, every line the fix."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "rankscope", "gpu-test", "--timeout", "30"]  # fmt: skip
    proc = subprocess.run(
        cmd, env=env(NCCL_SOCKET_IFNAME="nosuch"), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if "FAILED at config" in line]
    assert 1 <= len(lines) <= 2, proc.stdout + proc.stderr
    assert all("NCCL_SOCKET_IFNAME=nosuch names nosuch" in line for line in lines)
    assert "OK" not in proc.stdout.split()


def test_a_rank_names_its_set_up_mistake_before_importing_torch(tmp_path: Path) -> None:
    """The rank's own check runs first: with torch unimportable the mistake, not the missing torch, is
    what it says (and a rank that would fail anyway does not spend seconds importing torch)."""
    result = run_cli(
        "gpu-test", "--timeout", "5",
        env=env(GLOO_SOCKET_IFNAME="nosuch0", PYTHONPATH=hide_module(tmp_path, "torch")), timeout=60,
    )  # fmt: skip
    assert result.returncode == 13, result.stdout + result.stderr
    assert re.search(
        r"^\[[^\]]+:0\] FAILED at config: GLOO_SOCKET_IFNAME=nosuch0 names nosuch0", result.stdout, re.M
    )
    assert "PyTorch" not in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_master_is_a_clear_failure_within_the_timeout() -> None:
    port = free_port()  # nobody listens there
    result = run_cli(
        "gpu-test", "--timeout", "5", "--backend", "gloo",
        env=env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"),
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 11, result.stdout + result.stderr
    assert (
        f"FAILED at store: cannot reach the rendezvous store at 127.0.0.1:{port} within 5 s" in result.stdout
    )
    assert "connection refused" in result.stdout and "rank 0 is not listening" in result.stdout


def test_ranks_that_never_join_are_named_by_rank_0_with_their_hosts() -> None:
    # task 0 of an `srun --ntasks-per-node 1` step on n[1-3] (its variables), alone: tasks 1-2 never come
    port = free_port()
    srun = dict(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NTASKS="3", SLURM_STEP_ID="0",
                SLURM_STEP_NODELIST="n[1-3]", SLURM_STEP_TASKS_PER_NODE="1(x3)", SLURMD_NODENAME="n1")  # fmt: skip
    result = run_cli(
        "gpu-test", "--timeout", "5", "--backend", "gloo",
        env=env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **srun), timeout=120,
    )  # fmt: skip
    assert result.returncode == 12, result.stdout + result.stderr
    assert "ranks 1-2 (on n[2-3]) never joined within 5 s" in result.stdout
    assert "rank 0 waited for them at the store" in result.stdout


def test_isolate_names_the_failing_device_slot() -> None:
    result = run_cli(
        "gpu-test", "--isolate", "--devices", "0,1,2", "--timeout", "30",
        env=env(RANKSCOPE_GPUTEST_FAIL_DEVICE="1"), timeout=400,
    )  # fmt: skip
    assert result.returncode == 11, result.stdout + result.stderr
    assert re.search(r"alone\s+devices 1\s+FAILED", result.stdout)
    assert re.search(r"pairs\s+devices 2,0\s+OK", result.stdout)
    assert "device 1 fails on its own" in result.stdout
    assert not re.search(r"pairs\s+devices (0,1|1,2)", result.stdout)  # pairs with the bad device are not run


def test_bench_allreduce_prints_busbw_for_two_ranks() -> None:
    result = run_cli(
        "bench", "allreduce", "--nproc", "2", "--max-bytes", "256K", "--iters", "5", "--warmup", "1",
        env=env(), timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all_reduce float32, 2 ranks, gloo" in result.stdout
    header = next(line for line in result.stdout.splitlines() if "busbw(GB/s)" in line)
    assert "algbw(GB/s)" in header
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"\s+\d+K\s", line)]
    assert [row[0] for row in rows] == ["1K", "4K", "16K", "64K", "256K"]
    # two ranks: busbw = algbw * 2(2-1)/2 = algbw
    assert all(row[3] == row[4] for row in rows)


def test_bench_names_the_rank_the_others_wait_for() -> None:
    result = run_cli(
        "bench", "allreduce", "--nproc", "2", "--max-bytes", "16K", "--iters", "5", "--warmup", "1", "--json",
        env=env(RANKSCOPE_BENCH_DELAY_RANK="1", RANKSCOPE_BENCH_DELAY_S="0.1"), timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.bench.allreduce/1"
    assert [o["rank"] for o in document["outliers"]] == [1]


@pytest.mark.parametrize("args", [["--nproc", "2"], []])
def test_plot_without_matplotlib_stops_at_once_with_exit_6(tmp_path: Path, args: list[str]) -> None:
    png = tmp_path / "busbw.png"
    result = run_cli(
        "bench", "allreduce", *args, "--plot", str(png), env=env(PYTHONPATH=hide_module(tmp_path, "matplotlib")),
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 6, result.stdout + result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr  # one line
    assert "pip install matplotlib" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == "" and not png.exists()  # checked before any rank ran


@pytest.mark.parametrize(
    "args",
    [
        ["gpu-test"],
        ["gpu-test", "--nproc", "2"],
        ["gpu-test", "--isolate", "--devices", "0,1"],
        ["bench", "allreduce", "--nproc", "2"],
    ],
)
def test_without_torch_a_clear_error_and_exit_6(tmp_path: Path, args: list[str]) -> None:
    result = run_cli(*args, env=env(PYTHONPATH=hide_module(tmp_path, "torch")), timeout=60)
    assert result.returncode == 6, result.stdout + result.stderr
    assert "needs PyTorch and it is not installed" in result.stderr
    assert "pip install torch" in result.stderr and "Traceback" not in result.stderr


def test_a_rank_stuck_in_its_collective_ends_within_the_timeout_and_is_named() -> None:
    result = run_cli(
        "gpu-test", "--nproc", "2", "--timeout", "10", "--json",
        env=env(RANKSCOPE_GPUTEST_HANG_DEVICE="1"), timeout=240,
    )  # fmt: skip
    assert result.returncode == 11, result.stdout + result.stderr
    failed = {r["rank"]: r for r in result.json()["failed"]}
    assert failed[1]["step"] == "all_reduce"
    assert failed[1]["reason"] == "no answer from the backend within 10 s in all_reduce"

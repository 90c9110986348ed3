"""`rankscope launch` output executed for real: torchrun and a gloo job here, Open MPI, SLURM.

Each test runs the printed text as it is (bash reads it: heredocs write the hostfile or the sbatch
script, then the launcher starts), with a 2-rank gloo job whose workers print their rank, the
all_reduce sum and the arguments they received, so a quoting or rank-variable mistake fails.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.slurm import SlurmCluster
from tests.support.sshd import Sshd, free_port

from rankscope.launch.builders import build
from rankscope.launch.plan import Launcher, LaunchPlan, Prefix
from rankscope.launch.render import render_report

ARGS = ("it's a $test", 'say "hi"')
JOB = """\
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
line = f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(total.item())} args {sys.argv[1:]!r}"
if "--print" in sys.argv:
    print(line, flush=True)  # unbuffered (PYTHONUNBUFFERED=1): the text and the newline are two writes
else:
    sys.stdout.write(line + "\\n")  # one write
    sys.stdout.flush()
dist.destroy_process_group()
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def _plan(tmp: Path, **fields: object) -> LaunchPlan:
    (tmp / "job.py").write_text(JOB)
    base: dict[str, object] = dict(
        script="job.py", args=ARGS, nodes=1, gpus=2, python=sys.executable, workdir=str(tmp), port=free_port()
    )
    base.update(fields)
    return LaunchPlan(**base)  # type: ignore[arg-type]


def _run(
    tmp: Path, plan: LaunchPlan, launcher: Launcher, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    text = render_report(build(plan, [launcher]))
    return subprocess.run(["bash", "-c", text], cwd=tmp, env=env, capture_output=True, text=True, timeout=180)


def _short_host() -> str:
    return subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()


def test_torchrun_command_runs_and_labels_every_rank(tmp_path: Path) -> None:
    plan = _plan(tmp_path, master_addr="127.0.0.1")
    result = _run(tmp_path, plan, Launcher.TORCHRUN, _env())
    assert result.returncode == 0, result.stdout + result.stderr
    host = _short_host()
    for rank in (0, 1):
        assert f"[{host}:{rank}]:rank {rank} of 2 sum 2 args {list(ARGS)!r}" in result.stdout, result.stdout


def test_torchrun_with_rankscope_prefix(tmp_path: Path) -> None:
    plan = _plan(tmp_path, master_addr="127.0.0.1", prefix=Prefix.RANKSCOPE)
    result = _run(tmp_path, plan, Launcher.TORCHRUN, _env())
    assert result.returncode == 0, result.stdout + result.stderr
    host = socket.gethostname()
    for rank in (0, 1):
        assert f"[{host}:{rank}] rank {rank} of 2 sum 2 args {list(ARGS)!r}" in result.stdout, result.stdout


def test_two_node_torchrun_commands_label_lines_with_the_global_rank(tmp_path: Path) -> None:
    """Two "nodes" on this machine, one process each: node 1's only worker is local rank 0 but rank 1."""
    plan = _plan(tmp_path, nodes=2, gpus=1, hosts=("first", "second"), master_addr="127.0.0.1")
    (recipe,) = build(plan, [Launcher.TORCHRUN]).recipes
    nodes = [
        subprocess.Popen(
            ["bash", "-c", c.command], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, text=True
        )
        for c in recipe.commands
    ]
    outputs = [node.communicate(timeout=180)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    host = _short_host()
    assert f"[{host}:0]:rank 0 of 2 sum 2" in outputs[0]
    assert f"[{host}:1]:rank 1 of 2 sum 2" in outputs[1]


@pytest.mark.needs("openmpi")
def test_mpirun_command_runs_with_tagged_output(tmp_path: Path) -> None:
    plan = _plan(tmp_path, hosts=("localhost",), master_addr="127.0.0.1")
    env = _env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = _run(tmp_path, plan, Launcher.MPIRUN, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "hostfile").read_text() == "localhost slots=2\n"
    for rank in (0, 1):
        assert re.search(
            rf"^\[\d+,{rank}\]<stdout>:rank {rank} of 2 sum 2 args {re.escape(repr(list(ARGS)))}$",
            result.stdout,
            re.M,
        ), result.stdout


@pytest.mark.needs("openmpi")
def test_mpirun_with_rankscope_prefix_labels_whole_lines(tmp_path: Path) -> None:
    """--tag-output tags each write, so print() under PYTHONUNBUFFERED=1 comes out as
    "[1,0]<stdout>:text[1,0]<stdout>:" + newline; `rankscope prefix` labels whole lines."""
    plan = _plan(
        tmp_path, args=("--print",), hosts=("localhost",), master_addr="127.0.0.1", prefix=Prefix.RANKSCOPE
    )
    env = _env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    result = _run(tmp_path, plan, Launcher.MPIRUN, env)
    assert result.returncode == 0, result.stdout + result.stderr
    host = socket.gethostname()
    lines = [line for line in result.stdout.splitlines() if " sum " in line]
    assert sorted(lines) == [f"[{host}:{rank}] rank {rank} of 2 sum 2 args ['--print']" for rank in (0, 1)]


def _wait_done(cluster: SlurmCluster, jobid: str, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while cluster.job_state(jobid):
        if time.monotonic() > deadline:
            cluster.run("scancel", jobid, check=False)
            raise TimeoutError(f"job {jobid} still {cluster.job_state(jobid)}: {cluster.log_tail()}")
        time.sleep(0.3)


@pytest.mark.needs("slurm")
@pytest.mark.parametrize("launcher", [Launcher.SBATCH, Launcher.SRUN])
def test_sbatch_script_runs_in_slurm(slurm_cluster: SlurmCluster, tmp_path: Path, launcher: Launcher) -> None:
    plan = _plan(tmp_path, slurm_gpus=False, job_name=f"launch-{launcher}")
    env = _env(**{k: v for k, v in slurm_cluster.env.items() if k != "PATH"})
    result = _run(tmp_path, plan, launcher, env)
    assert result.returncode == 0, result.stdout + result.stderr
    jobid = re.search(r"Submitted batch job (\d+)", result.stdout)
    assert jobid, result.stdout
    _wait_done(slurm_cluster, jobid[1])
    output = (tmp_path / f"launch-{launcher}-{jobid[1]}.out").read_text()
    for rank in (0, 1):
        line = f"rank {rank} of 2 sum 2 args {list(ARGS)!r}"
        label = f"[{_short_host()}:{rank}]:" if launcher == Launcher.SBATCH else f"{rank}: "
        assert label + line in output, output


@pytest.mark.needs("pdsh")
def test_pdsh_command_starts_every_node(sshd_nodes: Sshd, pdsh_installed: None, tmp_path: Path) -> None:
    """Two ssh "nodes" (aliases of one sshd on 127.0.0.1), one torchrun each, node ranks from the c10d rendezvous."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    plan = _plan(
        tmp_path, gpus=1, nodes=2, hosts=("node01", "node02"), master_addr="127.0.0.1", torchrun=(torchrun,)
    )
    env = _env(PDSH_SSH_ARGS_APPEND=f"-F {sshd_nodes.ssh_config}")
    result = _run(tmp_path, plan, Launcher.PDSH, env)
    assert result.returncode == 0, result.stdout + result.stderr
    host = _short_host()
    for rank in (0, 1):
        line = re.search(
            rf"^node0[12]: \[{host}:{rank}\]:rank {rank} of 2 sum 2 args (.*)$", result.stdout, re.M
        )
        assert line and line[1] == repr(list(ARGS)), result.stdout

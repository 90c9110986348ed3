"""The generated text, run by a real bash, hands the script the exact argv it was given.

Every launcher's output (`rankscope launch --format X`, heredocs included) is executed whole by
bash with stand-in launchers (tests/launch/fakes.py) that treat their argv as the real ones do; the
worker records what it received. Hypothesis draws script names and arguments with spaces, quotes,
``$``, backslashes, newlines and any other character a shell might read.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.launch.fakes import install_fakes, read_argv

from rankscope.launch.builders import build
from rankscope.launch.plan import Launcher, LaunchPlan, Prefix
from rankscope.launch.render import render_report

WORKER = {
    Launcher.TORCHRUN: "torchrun",
    Launcher.SBATCH: "torchrun",
    Launcher.SRUN: "python3",
    Launcher.PDSH: "torchrun",
    Launcher.MPIRUN: "python3",
    Launcher.DEEPSPEED: "deepspeed",
}
NASTY = [
    "run 1",
    "it's",
    'say "hi"',
    "$HOME",
    "$(hostname)",
    "`id`",
    "a\\b",
    "tab\there",
    "new\nline",
    "*",
    "-x",
    "",
]


def run_recipe(tmp: Path, plan: LaunchPlan, launcher: Launcher) -> list[str]:
    env = install_fakes(tmp / "bin")
    env["ARGV_OUT"] = str(tmp / "argv")
    (tmp / "argv").unlink(missing_ok=True)
    (tmp / "argv.prefixed").unlink(missing_ok=True)
    text = render_report(build(plan, [launcher]))
    result = subprocess.run(
        ["bash", "-c", text], cwd=tmp, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, (text, result.stderr)
    return read_argv(tmp / "argv")


@pytest.mark.parametrize("launcher", list(Launcher))
def test_nasty_arguments_arrive_unchanged(tmp_path: Path, launcher: Launcher) -> None:
    plan = LaunchPlan("my train.py", tuple(NASTY), nodes=1, gpus=2, workdir=str(tmp_path))
    argv = run_recipe(tmp_path, plan, launcher)
    assert argv[-len(NASTY) - 1 :] == ["my train.py", *NASTY]


@pytest.mark.parametrize("launcher", [Launcher.TORCHRUN, Launcher.SBATCH, Launcher.PDSH])
def test_hostname_expands_on_the_node(tmp_path: Path, launcher: Launcher) -> None:
    argv = run_recipe(tmp_path, LaunchPlan("t.py", ("$(hostname -s)",), workdir=str(tmp_path)), launcher)
    role = argv[argv.index("--role") + 1]
    short = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert role == f"{short}:"
    assert (tmp_path / "argv.template").read_text() == "[${role_name}${rank}]:"
    assert argv[-1] == "$(hostname -s)"  # the script's own argument is not expanded
    assert short == socket.gethostname().split(".")[0]


def test_sbatch_reads_the_node_rank_from_slurm(tmp_path: Path) -> None:
    argv = run_recipe(tmp_path, LaunchPlan("t.py", nodes=2, gpus=4, workdir=str(tmp_path)), Launcher.SBATCH)
    assert argv[argv.index("--node-rank") + 1] == "0"  # $SLURM_PROCID on the node
    assert argv[argv.index("--nnodes") + 1] == "1"  # $SLURM_NNODES there
    assert argv[argv.index("--master-addr") + 1] == "node1"  # scontrol show hostnames


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=12
    ),
    args=st.lists(
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=16),
        max_size=4,
    ),
    launcher=st.sampled_from(list(Launcher)),
    prefix=st.sampled_from(list(Prefix)),
)
def test_any_argv_survives_the_shell(
    tmp_path: Path, script: str, args: list[str], launcher: Launcher, prefix: Prefix
) -> None:
    plan = LaunchPlan(script, tuple(args), nodes=1, gpus=1, workdir=str(tmp_path), prefix=prefix)
    argv = run_recipe(tmp_path, plan, launcher)
    if prefix == Prefix.RANKSCOPE and WORKER[launcher] == "python3":
        assert (tmp_path / "argv.prefixed").exists()
    if prefix == Prefix.RANKSCOPE and WORKER[launcher] == "torchrun":
        assert argv[argv.index("--no-python") + 1 : argv.index("--no-python") + 5] == [
            "rankscope",
            "prefix",
            "--",
            "python3",
        ]
    assert argv[-len(args) - 1 :] == [script, *args]

"""`rankscope launch --watch`: the sbatch step under `rankscope watch`, and SLURM's time-limit warning
(SIGUSR1 to the batch shell) passed on to the watcher by the script's trap, run for real in bash
with stand-ins for the SLURM commands and for rankscope itself."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.leftovers import wait_for

from rankscope.launch.builders import build
from rankscope.launch.plan import Launcher, LaunchPlan

FAKE_WATCH = """#!/bin/bash
echo "$@" > "$HOME/argv"
trap 'echo usr1 > "$HOME/got"; exit 3' USR1
touch "$HOME/up"
while :; do sleep 0.05; done
"""


def _script(launcher: Launcher, watch: bool) -> str:
    recipe = build(LaunchPlan("train.py", nodes=2, gpus=4, watch=watch), [launcher]).recipes[0]
    return recipe.files[0].text


def test_without_watch_the_script_is_unchanged() -> None:
    text = _script(Launcher.SBATCH, watch=False)
    assert "--signal" not in text and "rankscope watch" not in text and "trap" not in text


def test_watch_adds_the_signal_line_and_runs_the_step_under_the_watcher() -> None:
    for launcher in (Launcher.SBATCH, Launcher.SRUN):
        text = _script(launcher, watch=True)
        assert "#SBATCH --signal=B:USR1@120\n" in text
        step = next(line for line in text.splitlines() if line.startswith("rankscope watch"))
        assert step.startswith(
            'rankscope watch --inproc --jobid "$SLURM_JOB_ID" --out "rankscope-watch-$SLURM_JOB_ID" -- srun '
        )
        assert step.endswith(" &")


def _batch_shell(tmp_path: Path, scontrol: str, jobid: str) -> subprocess.Popen[bytes]:
    """The sbatch script run in bash (a session of its own) with stand-ins for rankscope and scontrol."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rankscope").write_text(FAKE_WATCH)
    (bin_dir / "scontrol").write_text(scontrol)
    for tool in ("rankscope", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(_script(Launcher.SBATCH, watch=True).replace(f"cd {os.getcwd()}", f"cd {tmp_path}"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    env.update(SLURM_JOB_ID=jobid, SLURM_JOB_NODELIST="node1")
    return subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path, start_new_session=True)


def test_the_batch_shell_passes_the_warning_on_and_exits_with_the_watchers_code(tmp_path: Path) -> None:
    shell = _batch_shell(tmp_path, "#!/bin/sh\necho node1\n", "77")
    try:
        wait_for(lambda: (tmp_path / "up").exists(), 30, "the stand-in watcher")
        time.sleep(0.2)  # the watcher's pid is known to the trap right after it starts
        shell.send_signal(signal.SIGUSR1)  # what #SBATCH --signal=B:USR1@120 does
        assert shell.wait(30) == 3
        assert (tmp_path / "got").read_text() == "usr1\n"
        assert (
            (tmp_path / "argv")
            .read_text()
            .startswith("watch --inproc --jobid 77 --out rankscope-watch-77 -- srun bash -c ")
        )
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()


def test_a_warning_before_the_watcher_starts_leaves_the_batch_shell_running(tmp_path: Path) -> None:
    """SLURM may send the warning early (by up to a minute): one that comes before the watcher starts
    finds the trap already set, so the batch shell lives on and runs the step under the watcher."""
    assert "scontrol" in _script(Launcher.SBATCH, watch=True).split("rankscope watch")[0]  # runs before it
    # The first SLURM command the script runs sends the batch shell (its session's leader, field 6 of
    # /proc/PID/stat) the warning.
    shell = _batch_shell(tmp_path, "#!/bin/sh\nkill -USR1 $(cut -d' ' -f6 /proc/$$/stat)\necho node1\n", "78")
    try:
        wait_for(lambda: (tmp_path / "up").exists(), 30, "the stand-in watcher")
        assert shell.poll() is None
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()

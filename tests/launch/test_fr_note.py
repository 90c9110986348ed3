"""Every launch script says how to keep the flight recorder for `rankscope fr`, as a comment only."""

from __future__ import annotations

import subprocess

from rankscope.launch.builders import build
from rankscope.launch.plan import Launcher, LaunchPlan
from rankscope.launch.render import render_report


def test_the_recorder_variables_are_named_in_a_comment_the_shell_ignores() -> None:
    text = render_report(build(LaunchPlan("train.py"), [Launcher.TORCHRUN]))
    line = text.splitlines()[1]
    assert line.startswith("# collective desync: export TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=")
    result = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "TORCH_FR_BUFFER_SIZE" not in text.replace(line, "")

"""The guardian's shell front (rankscope.lifetime): a run whose children were all leaves, reaped,
ends without starting the Python guardian; any other run, a SIGKILL or many notes start it.

Real processes: the child script points ``sys.executable`` at a wrapper that leaves a file each
time it is started, so the test sees whether the Python guardian ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.leftovers import alive, wait_for

CHILD = textwrap.dedent(
    """
    import os, sys
    from rankscope import lifetime
    from rankscope.stacks.runner import Runner

    sys.executable = sys.argv[1]  # the wrapper: it records each start of the Python guardian
    how = sys.argv[2]
    runner = Runner(dict(os.environ))
    import shutil

    leaf = runner.spawn([shutil.which("sleep"), "300" if how == "killed" else "0"], timeout=600)
    if how == "wide":
        lifetime.run(["true"], 30)
    if how == "notes":
        for pid in range(1, 1 + lifetime.LIGHT_NOTES // 10):
            lifetime.note_target(pid, "S")
            lifetime.release_target(pid, resume=False)
    print(lifetime.guardian(leaf=True).pid, leaf.child, flush=True)
    lifetime.leaf_reaped()  # the leaf just counted above
    if how != "killed":
        runner.finish_all()
    else:
        import time

        time.sleep(300)
    """
)


def _run(tmp_path: Path, how: str) -> tuple[int, int, Path]:
    """Run the child script: the guardian's pid, the leaf's, and the directory of the wrapper's marks."""
    marks = tmp_path / "marks"
    marks.mkdir()
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marks}/$$"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o700)
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(wrapper), how],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None
        guardian, leaf = (int(word) for word in parent.stdout.readline().split())
        if how == "killed":
            os.kill(parent.pid, signal.SIGKILL)  # the parent alone: its leaf is the guardian's to end
        assert parent.wait(60) == (-signal.SIGKILL if how == "killed" else 0)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
    return guardian, leaf, marks


def _started(marks: Path) -> int:
    return len(list(marks.iterdir()))


def test_a_run_of_leaves_only_ends_without_the_python_guardian(tmp_path: Path) -> None:
    guardian, _, marks = _run(tmp_path, "leaves")
    wait_for(lambda: not alive(guardian), 30, "the guardian's front to exit")
    assert _started(marks) == 0


def test_a_child_that_may_leave_descendants_brings_the_python_guardian(tmp_path: Path) -> None:
    guardian, _, marks = _run(tmp_path, "wide")
    wait_for(lambda: not alive(guardian), 30, "the guardian to exit")
    assert _started(marks) == 1


def test_a_sigkill_brings_the_python_guardian_which_ends_the_leaf(tmp_path: Path) -> None:
    guardian, leaf, marks = _run(tmp_path, "killed")
    try:
        wait_for(lambda: not alive(guardian), 30, "the guardian to exit")
        assert _started(marks) == 1
        assert not alive(leaf), "the leaf outlived its killed parent"
    finally:
        if alive(leaf):
            os.kill(leaf, signal.SIGKILL)


def test_many_notes_hand_over_to_the_python_guardian(tmp_path: Path) -> None:
    guardian, _, marks = _run(tmp_path, "notes")
    wait_for(lambda: not alive(guardian), 30, "the front to exit")  # it got `end` at the handover
    wait_for(lambda: _started(marks) == 1, 30, "the Python guardian to start")

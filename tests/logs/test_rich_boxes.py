"""A traceback that the rich library drew in a box (accelerate's and transformers' scripts install its
handler) is read as Python prints it: its frames, the line marked as each frame's own, its exception.
The real case: a script with rich's handler installed raising through two functions, its output to a
file; then the same under a rank's prefix, as torchrun --tee writes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli

_SCRIPT = """
from rich.traceback import install
install(width=100)
def load_shard(index):
    raise ValueError(f"shard {index} holds torch.bfloat16 and torch.float32 tensors")
def main():
    load_shard(3)
main()
"""


def _rich_traceback(tmp_path: Path) -> str:
    pytest.importorskip("rich")
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr, done.stderr
    assert '  File "' not in done.stderr  # rich's box, not Python's lines
    return done.stderr


def test_a_boxed_traceback_is_read_with_its_frames_and_exception(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(_rich_traceback(tmp_path))
    data = run_cli("logs", "errors", str(log), "--json").json()
    (group,) = data["groups"]
    assert (group["exception_type"], group["message"]) == (
        "ValueError",
        "shard 3 holds torch.bfloat16 and torch.float32 tensors",
    ), group
    # the box cuts a long code line at its width; a long path wraps inside it and is joined
    assert [(f["function"], f["line"], f["code"][:24]) for f in group["frames"]] == [
        ("<module>", 8, "main()"),
        ("main", 7, "load_shard(3)"),
        ("load_shard", 5, 'raise ValueError(f"shard'),
    ], group["frames"]
    assert {f["filename"] for f in group["frames"]} == {str(tmp_path / "job.py")}, group["frames"]
    assert data["verdict"]["where"].endswith("job.py:5"), data["verdict"]


def test_a_boxed_traceback_under_a_rank_s_prefix_is_that_rank_s(tmp_path: Path) -> None:
    text = _rich_traceback(tmp_path)
    log = tmp_path / "job.log"
    other = "".join(f"[default0]:step {n}\n" for n in range(3))
    log.write_text(other + "".join(f"[default1]:{line}\n" for line in text.splitlines()))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["exception"]) == ("1", "ValueError"), verdict
    assert verdict["where"].endswith("job.py:5"), verdict  # its frames were read, not its last line only


def test_a_path_whose_function_the_box_puts_on_the_next_line_is_one_frame(tmp_path: Path) -> None:
    """rich wraps a frame's head at a space: with a path just short of the box's width, the function
    (``…/job.py:7 in`` then ``<module>``), or ``in FUNC`` (``…/other.py:81`` then ``in wait``), goes to
    the next line. Real rich output at widths 70 and 90 with paths of every length near the cut."""
    pytest.importorskip("rich")
    for width in (70, 90):
        for extra in range(0, 12):
            folder = tmp_path / f"w{width}" / ("d" * (width - 40 + extra))
            folder.mkdir(parents=True)
            script = folder / "job.py"
            script.write_text(_SCRIPT.replace("install(width=100)", f"install(width={width})"))
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
            log = folder / "job.log"
            log.write_text(done.stderr)
            (group,) = run_cli("logs", "errors", str(log), "--json").json()["groups"]
            functions = [(f["function"], f["line"], f["filename"]) for f in group["frames"]]
            assert functions == [
                ("<module>", 8, str(script)),
                ("main", 7, str(script)),
                ("load_shard", 5, str(script)),
            ], (done.stderr, functions)


BOX_IN_APART = """\
worker-2: ╭──────────────────── Traceback (most recent call last) ────────────────────╮
worker-2: │ /srv/venv/lib/python3.10/site-packages/accelerate/utils/other.py:81        │
worker-2: │ in wait_for_everyone                                                        │
worker-2: │                                                                             │
worker-2: │ ❱  81 │   │   torch.distributed.barrier()                                   │
worker-2: │                                                                             │
worker-2: │ /srv/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.p │
worker-2: │ y:3145 in barrier                                                           │
worker-2: ╰─────────────────────────────────────────────────────────────────────────────╯
worker-2: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, internal error, NCCL version 2.14.3
"""


def test_in_func_on_a_line_of_its_own_joins_the_path_before_it(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(BOX_IN_APART)
    (group,) = run_cli("logs", "errors", str(log), "--json").json()["groups"]
    assert [(f["function"], f["line"]) for f in group["frames"]] == [
        ("wait_for_everyone", 81),
        ("barrier", 3145),
    ]

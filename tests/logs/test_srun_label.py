"""`srun --label` output (``N: text``) with 12 tasks: ids padded to two columns.

Written by hand in srun's documented ``--label`` format (the task id right-aligned to the
width of the largest id, then ``: ``) to cover padding, which the real 4-task srun run in
test_srun_real.py (on the SLURM fixture) does not show.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli

TB = [
    "Traceback (most recent call last):",
    '  File "/w/train.py", line 9, in <module>',
    "    run()",
]


def _srun_log(tmp_path: Path) -> Path:
    lines = [f"{r:>2}: starting task {r}" for r in range(12)]
    for index in range(len(TB)):
        for r in range(12):
            lines.append(f"{r:>2}: {TB[index]}")
    for r in range(12):
        error = (
            "OSError: [Errno 28] No space left on device" if r == 11 else f"AssertionError: shard {r} empty"
        )
        lines.append(f"{r:>2}: {error}")
    path = tmp_path / "srun.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_srun_label_errors_and_ranks(tmp_path: Path) -> None:
    path = _srun_log(tmp_path)
    data = run_cli("logs", "errors", str(path), "--json").json()
    assert [(g["exception_type"], g["ranks"]) for g in data["groups"]] == [
        ("AssertionError", "0-10"),
        ("OSError", "11"),
    ]
    ranks = run_cli("logs", "ranks", str(path), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == [str(r) for r in range(12)]
    assert ranks["unprefixed_lines"] == 0


def test_srun_label_grep(tmp_path: Path) -> None:
    out = run_cli("logs", "grep", "--rank", "1", str(_srun_log(tmp_path))).stdout.splitlines()
    assert out[0] == "starting task 1"
    assert out[-1] == "AssertionError: shard 1 empty"
    assert len(out) == 5


def test_srun_label_around_torchrun_tee(tmp_path: Path) -> None:
    """`srun --label torchrun --tee 3 ...`: task id (one per node) outside, torchrun's local rank inside."""
    lines = []
    for task in range(2):
        for local in range(2):
            lines.append(f"{task}: [default{local}]:step 1")
    for text in TB + ["ValueError: bad input"]:
        for task in range(2):
            for local in range(2):
                lines.append(f"{task}: [default{local}]:[rank{task * 2 + local}]: {text}")
    path = tmp_path / "srun_torchrun.log"
    path.write_text("\n".join(lines) + "\n")
    data = run_cli("logs", "errors", str(path), "--json").json()
    assert [(g["exception_type"], g["labels"]) for g in data["groups"]] == [
        ("ValueError", ["0:0", "0:1", "1:0", "1:1"])
    ]
    out = run_cli("logs", "grep", "--rank", "1:0", str(path)).stdout.splitlines()
    assert out == ["step 1", *TB, "ValueError: bad input"]

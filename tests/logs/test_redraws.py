"""A progress bar that redraws its line (tqdm's carriage returns) and the text another writer puts
after it: a rank's traceback is read, not hidden behind the bar. The real case: two processes on one
output file, one drawing a bar the way tqdm does (``\\r`` and the bar, no newline: the next writer's
text follows the last bar on its line), the other raising under torch's ``[rank3]:`` marker; then a
paste that lost the carriage returns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli

from rankscope.logs.redraws import split_redraws

_JOB = r"""
import os, subprocess, sys, time
here = sys.argv[1]
if len(sys.argv) > 2:
    if sys.argv[2] == "bar":
        for step in range(1, 4):
            os.write(2, f"\r  {step}%|#         | {step}/300 [00:0{step}<01:40,  2.9{step}it/s]".encode())
        open(os.path.join(here, "drawn"), "w").close()
        while not os.path.exists(os.path.join(here, "gone")):
            time.sleep(0.01)
        sys.exit(0)
    while not os.path.exists(os.path.join(here, "drawn")):
        time.sleep(0.01)
    lines = ["Traceback (most recent call last):", '  File "/job/train.py", line 61, in step',
             "    loss.backward()", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.82 GiB."]
    os.write(2, "".join(f"[rank3]: {line}\n" for line in lines).encode())
    sys.exit(1)
bar = subprocess.Popen([sys.executable, __file__, here, "bar"])
rank = subprocess.Popen([sys.executable, __file__, here, "rank"])
rank.wait()
open(os.path.join(here, "gone"), "w").close()
bar.wait()
"""


def _verdict(log: Path) -> dict[str, object]:
    verdict: dict[str, object] = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    return verdict


def test_a_traceback_after_a_bar_s_redraws_is_read(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    log = tmp_path / "job.log"
    with log.open("wb") as out:
        subprocess.run(
            [sys.executable, str(script), str(tmp_path)],
            stdout=out,
            stderr=out,
            timeout=60,
            env=dict(os.environ),
        )
    raw = log.read_bytes()
    # tqdm rewinds before each draw, not after: the next writer's text follows the last bar at once
    assert b"\r  3%|" in raw and b"2.93it/s][rank3]: Traceback" in raw, raw
    verdict = _verdict(log)
    assert (verdict["who"], verdict["exception"], verdict["where"]) == (
        "3",
        "torch.OutOfMemoryError",
        "/job/train.py:61",
    )
    # pasted: the carriage returns gone too, the three bars one line
    log.write_bytes(raw.replace(b"\r", b""))
    assert _verdict(log)["where"] == "/job/train.py:61"


def test_only_redraws_and_glued_bars_are_split() -> None:
    crlf = b"step 1\r\nstep 2\r\n"
    assert split_redraws(crlf) is crlf  # Windows line endings: nothing to do
    assert split_redraws(b" 5%|#  | 5/100 [00:05<01:35,  1.00it/s]\r 6%|#  | 6/100\n") == (
        b" 5%|#  | 5/100 [00:05<01:35,  1.00it/s]\n 6%|#  | 6/100\n"
    )
    glued = b" 3%|#  | 3712/62565 [04:41<1:11:02, 13.81it/s]scripts/run.sh: line 9: 918442 Killed  torchrun\n"
    assert split_redraws(glued).split(b"\n")[1] == b"scripts/run.sh: line 9: 918442 Killed  torchrun"
    # a postfix in the bracket (tqdm's set_postfix, Lightning's loss and v_num)
    posted = b"Epoch 4:  12%|#  | 118/1000 [01:35<11:52,  1.24it/s, loss=0.690, v_num=12][rank2]: Traceback\n"
    assert split_redraws(posted).split(b"\n")[1] == b"[rank2]: Traceback"
    # a bar that ends its line, or one followed by a space or tqdm's own "|": no cut
    for kept in (b"[00:05<01:35,  1.00it/s]\n", b"[00:05, 1.00it/s] done\n", b"rate [3.1MB/s]|x\n"):
        assert split_redraws(kept) == kept


def test_a_shell_s_kill_glued_after_a_bar_is_read(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "epoch 1\n  6%|#         | 3712/62565 [04:41<1:11:02, 13.81it/s]"
        "scripts/train.sh: line 9: 918442 Killed                  torchrun --nproc-per-node 8 train.py\n"
    )
    verdict = _verdict(log)
    assert (verdict["who"], verdict["cause"]) == (None, "sigkill")

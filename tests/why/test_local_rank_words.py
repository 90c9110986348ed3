"""`why --log` names a launcher's local rank as one: torchrun without --tee (``failed (exitcode: 1)
local_rank: 1``) and DeepSpeed's launcher (``exits with return code = 1``) number the processes of
their own node, so the verdict says "local rank 1", with the node where the log names it ("local
rank 3 on worker-1" under pdsh); a global rank (torch's ``[rankN]:`` marker, mpirun's process name,
torchrun's summary, also of the death a local line reports) stays "rank N". The logs are written here
as those launchers print them; no job is needed (a file is read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import run_cli, run_cli_here
from tests.support.torchrun_text import failure_summary

from rankscope.cluster.classify import NodeResult
from rankscope.model import Stage
from rankscope.why.nodes import merge_answers, parse_answer
from rankscope.why.output import read_logs
from rankscope.why.report import report_document
from rankscope.why.signals import Gathered
from rankscope.why.weigh import weigh

TRACEBACK = """\
Traceback (most recent call last):
  File "/home/u/train.py", line 21, in step
    raise RuntimeError("bad batch 10")
RuntimeError: bad batch 10
"""


def _torchrun(local: int, code: int) -> str:
    """torchrun's (torch.distributed.elastic's) line for one worker that failed, without --tee."""
    return (
        "[2026-11-27 03:00:05,100] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
        f"(exitcode: {code}) local_rank: {local} (pid: 200{local}) of binary: /usr/bin/python3\n"
    )


def _deepspeed(local: int, traceback: str = "") -> str:
    command = f"['python3', '-u', 'train.py', '--local_rank={local}']"
    return (
        f"[2026-11-27 03:00:00,100] [INFO] [launch.py:256:main] process 500{local} spawned with command: {command}\n"
        f"{traceback}"
        f"[2026-11-27 03:00:05,300] [ERROR] [launch.py:325:sigkill_handler] {command} exits with return code = 1\n"
    )


def _node(name: str, text: str) -> str:
    """Each line as pdsh prints a node's output."""
    return "".join(f"{name}: {line}\n" for line in text.splitlines())


def _why(tmp_path: Path, text: str) -> dict[str, Any]:
    log = tmp_path / "job.log"
    log.write_text(text)
    document: dict[str, Any] = run_cli_here("why", "--log", str(log), "--json").json()
    return document


def _evidence(hypothesis: dict[str, Any]) -> list[str]:
    return [e["text"] for e in hypothesis["evidence"]]


def test_torchrun_s_local_rank_is_named_local_in_the_text_and_the_json(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("step 9\n" + TRACEBACK + _torchrun(1, 1))
    shown = run_cli("why", "--log", str(log)).stdout
    assert "Verdict: local rank 1 raised RuntimeError: bad batch 10\n" in shown, shown
    verdict = _why(tmp_path, log.read_text())["verdict"]
    assert verdict["text"] == "local rank 1 raised RuntimeError: bad batch 10"
    assert _evidence(verdict) == ["RuntimeError: bad batch 10", "torchrun: local rank 1 exited with code 1"]


def test_deepspeed_over_pdsh_names_the_local_rank_and_its_node(tmp_path: Path) -> None:
    """worker-1's launcher reports local rank 3, whose traceback is there; worker-0's reports its
    local rank 1 with no traceback: a weaker hypothesis, named after its own node."""
    text = _node("worker-1", _deepspeed(3, TRACEBACK)) + _node("worker-0", _deepspeed(1))
    document = _why(tmp_path, text)
    verdict = document["verdict"]
    assert verdict["text"] == "local rank 3 on worker-1 raised RuntimeError: bad batch 10"
    assert "deepspeed: local rank worker-1:3 exited with code 1" in _evidence(verdict)
    assert [h["text"].split(" exited")[0] for h in document["hypotheses"]] == ["local rank 1 on worker-0"]


def test_a_launcher_s_report_alone_names_the_local_rank(tmp_path: Path) -> None:
    killed = _why(tmp_path, "step 3\n" + _torchrun(2, -9))["verdict"]
    assert killed["text"] == "local rank 2 was killed by SIGKILL (the OOM killer or the scheduler)"
    exited = _why(tmp_path, _deepspeed(1))["verdict"]
    assert exited["text"].startswith("local rank 1 exited with an error code, and no traceback of it"), exited


def test_an_uncaught_cpp_exception_and_a_faulthandler_dump_name_the_local_rank(tmp_path: Path) -> None:
    """Both are named after the one process the launcher reports dead of their signal (SIGABRT,
    SIGSEGV): its local rank."""
    cpp = (
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  CUDA error: an illegal memory access was encountered\n"
    ) + _torchrun(2, -6)
    verdict = _why(tmp_path, cpp)["verdict"]
    assert verdict["text"] == (
        "local rank 2 aborted on an uncaught C++ exception: c10::Error: CUDA error: an illegal memory access "
        "was encountered"
    )
    verdict = _why(tmp_path, _node("worker-2", cpp))["verdict"]
    assert verdict["text"].startswith("local rank 2 on worker-2 aborted on an uncaught C++ exception"), (
        verdict
    )
    dump = (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f98f0e4bb80 (most recent call first):\n"
        '  File "/home/u/train.py", line 9 in save_checkpoint\n\n'
    ) + _torchrun(2, -11)
    verdict = _why(tmp_path, dump)["verdict"]
    assert verdict["text"].startswith("local rank 2 was killed by SIGSEGV"), verdict
    assert verdict["location"] == "save_checkpoint (train.py:9)"


def test_a_global_rank_stays_a_rank(tmp_path: Path) -> None:
    """torch's ``[rank1]:`` marker names global rank 1: the local rank 1 that torchrun reports is its
    evidence (one node's job), not another hypothesis; mpirun's process name is a global rank; so is
    the rank of torchrun's summary, which reports the death its local line reports."""
    marked = "".join(f"[rank1]:{line}\n" for line in TRACEBACK.splitlines()) + _torchrun(1, 1)
    document = _why(tmp_path, marked)
    assert (document["verdict"]["text"], document["verdict"]["ranks"]) == (
        "rank 1 raised RuntimeError: bad batch 10",
        [1],
    )
    assert "torchrun: local rank 1 exited with code 1" in _evidence(document["verdict"])
    assert document["hypotheses"] == []
    mpirun = (
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n\n"
        "  Process name: [[51234,1],3]\n  Exit code:    1\n"
    )
    verdict = _why(tmp_path, TRACEBACK + mpirun)["verdict"]
    assert (verdict["text"], verdict["ranks"]) == ("rank 3 raised RuntimeError: bad batch 10", [3])
    summary = failure_summary(1, 1, "node3", 2001, "2026-11-27_03:00:05")
    document = _why(tmp_path, "step 9\n" + _torchrun(1, 1) + summary)
    assert document["verdict"]["text"].startswith("rank 1 exited with an error code"), document["verdict"]
    assert _evidence(document["verdict"]) == [
        "torchrun: local rank 1 exited with code 1",
        "torchrun: rank 1 on node3: exit 1",
    ]
    assert document["hypotheses"] == []


def test_a_node_s_local_rank_is_named_with_the_node_at_the_head(tmp_path: Path) -> None:
    """`why --hosts`: a node's answer names its local rank 1; the head, joining every node's
    findings under the node's name, says which node's local rank 1 it is."""
    log = tmp_path / "job.log"
    log.write_text("step 9\n" + TRACEBACK + _torchrun(1, 1))
    gathered = Gathered(hosts=["n2"])
    read_logs([str(log)], gathered)
    node = weigh(gathered)
    assert node.verdict is not None and node.verdict.text == "local rank 1 raised RuntimeError: bad batch 10"
    answer = NodeResult("node02", Stage.OK, 3, json.dumps(report_document(node)), "")
    head = weigh(merge_answers([parse_answer(answer)]))
    assert head.verdict is not None
    assert head.verdict.text == "local rank 1 on node02 raised RuntimeError: bad batch 10"

"""A node's raw answer (`stacks --local --json --node-answer`) against its whole document: the head
derives the same report (text and JSON) from either, and a node that fails says the same.

The job is bench/fake_job.py: a plain-Python launcher and 2 workers with torchrun's rank variables,
hung (no torch, so cheap); tests/cluster/test_stacks_ssh.py runs the raw answers of a real hung
torchrun job through ssh.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankscope.cluster.classify import NodeResult
from rankscope.cluster.node_answer import load_answer
from rankscope.cluster.stacks_remote import classify_node, join_answers
from rankscope.model import Failure, FailureKind, RankId, Stage
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.node import NodeAnswer
from rankscope.stacks.render import render_text
from rankscope.stacks.report import StacksReport, report_document

FAKE_JOB = Path(__file__).resolve().parents[2] / "bench" / "fake_job.py"


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return sorted(int(word) for word in handle.read().split())


@pytest.fixture(scope="module")
def fake_job() -> Iterator[tuple[int, list[int]]]:
    """(launcher pid, worker pids) of a hung 2-rank job (node rank 1 of 2: ranks 2 and 3, rank 3 elsewhere)."""
    argv = [
        sys.executable,
        str(FAKE_JOB),
        "--node-rank",
        "1",
        "--nproc",
        "2",
        "--nnodes",
        "2",
        "--culprit",
        "3",
    ]
    launcher = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(children(launcher.pid)) < 2:
            assert time.monotonic() < deadline, "the fake job's workers did not start"
            time.sleep(0.05)
        time.sleep(0.3)  # past the workers' imports: in their loops
        yield launcher.pid, children(launcher.pid)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def node(*args: str, answer: bool) -> subprocess.CompletedProcess[str]:
    """A node's `stacks --local --json ARGS`, with the raw answer or the whole document."""
    argv = ["stacks", "--local", "--json", *(["--node-answer"] if answer else []), *args]
    return subprocess.run(
        [sys.executable, "-m", "rankscope", *argv], capture_output=True, text=True, timeout=60
    )


def head(*answers: subprocess.CompletedProcess[str]) -> tuple[dict[str, object], str]:
    """What the head makes of nodes that answered so: its JSON document (without the run's time) and text."""
    results = [
        NodeResult(
            f"node{i:02d}",
            Stage.OK if a.returncode == 0 else Stage.COMMAND_FAILED,
            a.returncode,
            a.stdout,
            a.stderr,
        )
        for i, a in enumerate(answers, start=1)
    ]
    report = join_answers(results).report
    report.diagnosis = diagnose(report)
    document = report_document(report)
    document.pop("seconds")
    return document, render_text(report, report.diagnosis, title="2 nodes").split("\n", 1)[1]


@pytest.mark.parametrize("extra", [(), ("--samples", "2", "--interval", "0.1")])
def test_the_head_makes_the_same_report_of_raw_answers(
    fake_job: tuple[int, list[int]], extra: tuple[str, ...]
) -> None:
    _, workers = fake_job
    args = [word for pid in workers for word in ("--pid", str(pid))] + ["--no-fr", *extra]
    raw, full = node(*args, answer=True), node(*args, answer=False)
    assert raw.returncode == full.returncode == 0, raw.stderr + full.stderr
    answer = json.loads(raw.stdout)
    assert answer["schema"] == NodeAnswer.SCHEMA and not answer["report"]["groups"]
    assert len(answer["dumps"]) == len(workers) * (2 if extra else 1)
    assert json.loads(full.stdout)["schema"] == "rankscope.stacks/1"
    # Two nodes of each kind, and one of each side by side: an older node answers with its whole document.
    raw_doc, raw_text = head(raw, raw)
    full_doc, full_text = head(full, full)
    assert raw_doc == full_doc
    assert raw_text == full_text
    assert "rank 3" in raw_text and "load_batch" in raw_text
    assert head(raw, full)[0] == full_doc
    if extra:
        assert {p["state"] for p in raw_doc["processes"]} == {"stuck"}  # type: ignore[union-attr]


def test_a_node_whose_every_dump_fails_says_why_as_before(tmp_path: Path) -> None:
    """Exit 5 (every dump failed): the node's own reason reaches the head, as from the whole document."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        answers = [node("--pid", str(sleeper.pid), answer=flag) for flag in (True, False)]
    finally:
        os.killpg(sleeper.pid, signal.SIGKILL)
        sleeper.wait()
    assert [a.returncode for a in answers] == [5, 5]
    refined = [
        classify_node(NodeResult("node07", Stage.COMMAND_FAILED, 5, a.stdout, a.stderr))[0] for a in answers
    ]
    assert [(r.stage, r.reason, r.hint) for r in refined[:1]] == [
        (r.stage, r.reason, r.hint) for r in refined[1:]
    ]
    assert refined[0].stage == Stage.DUMP_FAILED
    assert refined[0].reason == "every dump failed: not a Python process (sleep)"


def test_a_refused_node_answering_raw_gives_its_cause_and_fix() -> None:
    """Exit 7: the node's reason and hint reach the head from the raw answer as from the whole document."""
    cause = ("already traced by strace (pid 4242)", "wait for strace (pid 4242) to detach, or stop it")
    refusal = Failure("pid 11", Stage.ATTACH, *cause, RankId("vm", rank=1), FailureKind.PERMISSION)
    whole = report_document(StacksReport(hosts=["vm"], failures=[refusal]))
    for answer in ({"schema": NodeAnswer.SCHEMA, "report": whole, "dumps": {}}, whole):
        result, parsed = classify_node(NodeResult("node07", Stage.COMMAND_FAILED, 7, json.dumps(answer), ""))
        assert parsed is None
        assert (result.reason, result.hint) == (f"permission denied (ptrace): {cause[0]}", cause[1])


@pytest.mark.parametrize(
    "answer",
    [
        {"schema": "rankscope.stacks.node/2", "report": {}, "dumps": {}},
        {"schema": NodeAnswer.SCHEMA, "report": report_document(StacksReport())},
        {"schema": NodeAnswer.SCHEMA, "report": report_document(StacksReport()), "dumps": {"x.json": 5}},
    ],
)
def test_an_answer_the_head_cannot_read_is_refused(answer: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        load_answer(answer)


def test_a_damaged_dump_is_a_failure_of_its_rank_and_the_others_are_kept() -> None:
    report = StacksReport(hosts=["vm"])
    from rankscope.stacks.report import ProcessInfo

    report.processes = [ProcessInfo(11, RankId("vm", rank=0)), ProcessInfo(12, RankId("vm", rank=1))]
    good = [{"thread_name": "MainThread", "thread_id": 1, "os_thread_id": 11, "frames": [
        {"name": "barrier", "filename": "job.py", "line": 3}]}]  # fmt: skip
    dumps = {"vm.rank-0.pid-11.json": json.dumps(good), "vm.rank-1.pid-12.json": "[{"}
    loaded = load_answer({"schema": NodeAnswer.SCHEMA, "report": report_document(report), "dumps": dumps})
    assert [p.dumped for p in loaded.processes] == [True, False]
    assert [g.frames[0].function for g in loaded.groups] == ["barrier"]
    [failure] = loaded.failures
    assert failure.target == "dump vm.rank-1.pid-12.json" and failure.stage == Stage.PARSE


def test_past_ten_samples_a_node_answers_with_its_whole_document(fake_job: tuple[int, list[int]]) -> None:
    """A raw answer holds every sample's dumps; past RAW_SAMPLES_MAX the distinct stacks are smaller."""
    _, workers = fake_job
    answer = node("--pid", str(workers[0]), "--no-fr", "--samples", "11", "--interval", "0", answer=True)
    document = json.loads(answer.stdout)
    assert document["schema"] == "rankscope.stacks/1" and document["samples"] == 11, answer.stderr


def test_with_native_frames_a_node_answers_with_its_whole_document(fake_job: tuple[int, list[int]]) -> None:
    """--native picks representatives from the groups: the node groups its stacks itself and answers
    with the whole document, which the head reads as before."""
    _, workers = fake_job
    answer = node("--pid", str(workers[0]), "--no-fr", "--native", answer=True)
    assert answer.returncode == 4, answer.stderr  # partial: rank 3 of the node's two ranks not asked for
    document = json.loads(answer.stdout)
    assert document["schema"] == "rankscope.stacks/1" and document["groups"] and document["native"]
    assert [
        p.native for p in join_answers([NodeResult("n1", Stage.OK, 0, answer.stdout, "")]).report.processes
    ] == [True]

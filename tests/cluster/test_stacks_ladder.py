"""The stage ladder of a node's stacks answer: exit code and stdout of the remote rankscope -> stage."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rankscope.cluster.classify import NodeResult
from rankscope.cluster.stacks_remote import classify_node, node_failures, relabel_host
from rankscope.model import Failure, Member, RankId, Stage
from rankscope.stacks.report import ProcessInfo, StackGroup, StacksReport, load_report, report_document


def answer(dumped: bool, failure: str = "") -> str:
    report = StacksReport(hosts=["vm"])
    if dumped:
        report.processes = [ProcessInfo(pid=10, rank=RankId("vm", rank=0))]
        report.groups = [StackGroup("MainThread", True, (), [Member("vm", 10, 0)])]
    if failure:
        report.failures = [Failure("pid 11", Stage.DUMP, failure, "", RankId("vm", rank=1))]
    return json.dumps(report_document(report))


@pytest.mark.parametrize(
    ("rc", "stdout", "stderr", "stage", "reason"),
    [
        (0, answer(True), "", "ok", ""),
        (4, answer(True, "py-spy did not finish"), "", "ok", ""),
        (0, "Welcome to the cluster!\n" + answer(True), "", "ok", ""),
        (3, answer(False), "", "no job found", "no distributed job on this node"),
        (
            5,
            answer(False, "Operation not permitted"),
            "",
            "dump failed",
            "every dump failed: Operation not permitted",
        ),
        (6, "", "rankscope: error: py-spy not found on PATH", "dump failed", "py-spy is not installed there"),
        (
            7,
            answer(False, "permission denied"),
            "",
            "dump failed",
            "permission denied (ptrace): permission denied",
        ),
        (
            127,
            "",
            "sh: 1: rankscope: not found",
            "no rankscope there",
            "rankscope not found: sh: 1: rankscope: not found",
        ),
        (
            126,
            "",
            "sh: 1: /opt/rankscope: Permission denied",
            "no rankscope there",
            "rankscope is there but cannot run",
        ),
        (0, "not json", "", "bad answer", "exit 0 and no stacks JSON on stdout"),
        (2, "", "Error: No such option: --local", "command failed", "exit 2: Error: No such option: --local"),
    ],
)
def test_ladder(rc: int, stdout: str, stderr: str, stage: str, reason: str) -> None:
    answer = NodeResult("node07", Stage.OK if rc == 0 else Stage.COMMAND_FAILED, rc, stdout, stderr)
    before = replace(answer)
    result, report = classify_node(answer)
    assert answer == before  # the fan-out's result is not changed, a refined one is returned
    assert result.stage == stage
    assert result.reason.startswith(reason)
    assert (report is not None) == (stage == "ok")


def test_a_refused_node_gives_the_cause_and_fix_its_rankscope_found() -> None:
    """Exit 7 from a node: the node's own reason and hint, not the generic ptrace advice."""
    report = StacksReport(hosts=["vm"])
    report.failures = [
        Failure(
            "pid 11",
            Stage.ATTACH,
            "already traced by strace (pid 4242)",
            "wait for strace (pid 4242) to detach, or stop it",
            RankId("vm", rank=1),
        )
    ]
    answer = NodeResult("node07", Stage.COMMAND_FAILED, 7, json.dumps(report_document(report)), "")
    result, _ = classify_node(answer)
    assert result.reason == "permission denied (ptrace): already traced by strace (pid 4242)"
    assert result.hint == "wait for strace (pid 4242) to detach, or stop it"
    bare = NodeResult("node07", Stage.COMMAND_FAILED, 7, "", "rankscope: error: permission denied")
    assert "run as the job's user or root" in classify_node(bare)[0].hint


def test_transport_failures_keep_their_stage_and_fold_by_reason() -> None:
    refused = [
        NodeResult(f"n{i}", Stage.UNREACHABLE, None, "", "", "Connection refused", "h") for i in (1, 2, 4)
    ]
    for result in refused:
        assert classify_node(result) == (result, None)
    [failure] = node_failures(refused)
    assert (failure.target, failure.stage) == ("n[1-2,4]", "unreachable")


def test_ranks_are_labelled_with_the_node_name_given() -> None:
    report = load_report(json.loads(answer(True, "py-spy did not finish")))
    relabel_host(report, "gpu007")
    assert report.hosts == ["gpu007"]
    assert report.processes[0].rank.host == "gpu007"
    assert report.groups[0].members[0].host == "gpu007"
    assert report.failures[0].target == "gpu007: pid 11"

"""Every node's `why --local --json` answer joined at the head (pure): stacks merged and diagnosed
again, each node's own findings kept with the node's name, nodes that gave no answer listed."""

from __future__ import annotations

import json

from tests.why.test_weigh import BARRIER, _stacks

from rankscope.cluster.classify import NodeResult
from rankscope.evidence import CULPRIT, Finding, Kind
from rankscope.model import Stage
from rankscope.why.nodes import merge_answers, parse_answer
from rankscope.why.report import report_document
from rankscope.why.signals import Gathered
from rankscope.why.weigh import weigh


def _answer(node: str, gathered: Gathered, code: int) -> NodeResult:
    document = report_document(weigh(gathered))
    return NodeResult(node, Stage.OK, code, json.dumps(document), "")


def test_the_head_joins_what_no_node_sees_alone() -> None:
    node01 = Gathered(hosts=["n1"], stacks=_stacks({(0,): BARRIER}, world=2, host="n1"))
    dead = Finding(Kind.LAUNCHER, "sigkill", CULPRIT, "1", "rank 1 (pid 77) was killed by SIGKILL", None,
                   "exit status (/proc/77/stat)", 0, 0, 1)  # fmt: skip
    node02 = Gathered(hosts=["n2"], stacks=_stacks({}, world=2, host="n2"), log_findings=[dead])
    answers = [
        parse_answer(_answer("node01", node01, 15)),
        parse_answer(_answer("node02", node02, 15)),
        parse_answer(
            NodeResult("node03", Stage.OK, 1, "Traceback ...", "ImportError: no module named rankscope")
        ),
        parse_answer(
            NodeResult("node04", Stage.UNREACHABLE, None, "", "ssh: connect to host node04 port 22")
        ),
    ]
    report = weigh(merge_answers(answers))
    assert report.verdict is not None
    assert (report.verdict.cause, report.verdict.ranks) == ("sigkill", [1])
    assert report.verdict.evidence[0].source == "node02: exit status (/proc/77/stat)"
    assert any(e.source == "stacks" and "rank 0 waits in barrier" in e.text for e in report.verdict.evidence)
    assert report.nodes is not None
    assert [(n.node, n.stage) for n in report.nodes] == [
        ("node01", Stage.OK), ("node02", Stage.OK), ("node03", Stage.COMMAND_FAILED), ("node04", Stage.UNREACHABLE),
    ]  # fmt: skip
    assert [f.target for f in report.failures] == ["node03", "node04"]
    assert [(s.ranks, s.hosts) for s in report.ranks if s.state.startswith("waits")] == [("0", ["node01"])]


def test_a_node_without_rankscope_is_named() -> None:
    result, report = parse_answer(NodeResult("node05", Stage.OK, 127, "", "sh: rankscope: not found"))
    assert report is None
    assert result.stage == Stage.NO_RANKSCOPE

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


def test_the_flight_recorders_of_every_node_are_aligned_at_the_head() -> None:
    """Recorded gloo dumps (tests/data/fr/, `extra`: rank 0 issued one more all_reduce) split as two
    nodes would send them (`why --local --json`: compact, under stacks.fr_records): neither node's
    ranks alone show the desync of rank 0 against rank 2."""
    from pathlib import Path

    from rankscope.fr.collect import read_dumps
    from rankscope.serial import to_json
    from rankscope.stacks.fr_live import LiveRecorders, compact

    dumps = read_dumps(Path(__file__).resolve().parents[1] / "data" / "fr" / "gloo-torch2.13" / "extra").dumps
    answers = []
    for node, ranks in (("node01", {0, 1}), ("node02", {2})):
        gathered = Gathered(hosts=[node], stacks=_stacks({tuple(sorted(ranks)): BARRIER}, world=3, host=node))
        assert gathered.stacks is not None
        mine = LiveRecorders(dumps=[d for d in dumps if d.rank in ranks], world_size=3)
        gathered.stacks.fr_records = to_json(compact(mine))
        answers.append(parse_answer(_answer(node, gathered, 15)))
    report = weigh(merge_answers(answers))
    assert report.verdict is not None
    assert (report.verdict.cause, report.verdict.ranks) == ("collective_desync", [0])
    assert report.verdict.location is not None and report.verdict.location.startswith(
        "log_global_loss (fr_job.py:"
    )


def test_nccls_reason_for_a_nodes_error_reaches_the_heads_verdict() -> None:
    """A node cites NCCL's reason after its rank's DistBackendError (docs/why.md); the head, which
    weighs the findings the node sent, cites it too."""
    error = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"
    )
    raised = Finding(
        Kind.TRACEBACK, "python_exception", CULPRIT, "10", error, None, "/job/train.log", 3, 3, 10
    )
    said = [
        "NCCL's error: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "NCCL's last error: socketStartConnect: Connect to 10.20.0.15<48113> failed : Software caused connection abort",
    ]
    node = Gathered(hosts=["n2"], log_findings=[raised], log_reasons={("/job/train.log", 3): said})
    report = weigh(merge_answers([parse_answer(_answer("node02", node, 15))]))
    assert report.verdict is not None
    assert [(e.source, e.text) for e in report.verdict.evidence] == [
        ("node02: /job/train.log:3", error),
        *(("node02: /job/train.log:3", text) for text in said),
    ]

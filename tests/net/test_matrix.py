"""The reachability matrix in words (pure): a node nobody reaches, a node that reaches nobody, one bad link."""

from __future__ import annotations

import pytest

from rankscope.cli.net import probe_cmd, read_probe_options
from rankscope.net.check import assemble, node_argv, node_options, parse_answer
from rankscope.net.options import ProbeOptions
from rankscope.net.render import render_matrix
from rankscope.net.report import ProbeReport
from rankscope.net.verdicts import Cell, Matrix, ProbeResult, Verdict, findings
from rankscope.serial import dump_document

OK, R, F = Verdict.OPEN, Verdict.REFUSED, Verdict.FILTERED


def matrix(rows: dict[str, dict[str, Verdict]]) -> Matrix:
    nodes = list(rows)
    cells = [Cell(s, t, rows[s].get(t, OK)) for s in nodes for t in nodes]
    return Matrix(6000, nodes, cells)


def test_all_open_has_no_findings() -> None:
    assert findings(matrix({n: {} for n in "abcd"})) == []


def test_a_node_nobody_reaches_is_one_finding_not_three() -> None:
    m = matrix({"a": {"c": F}, "b": {"c": F}, "c": {}, "d": {"c": F}})
    [finding] = findings(m)
    assert finding.problem.startswith("no node reaches c:6000 (filtered)")
    assert "iptables -I INPUT -p tcp --dport 6000 -j ACCEPT" in finding.fix
    assert set(finding.links) == {("a", "c"), ("b", "c"), ("d", "c")}


def test_a_node_that_reaches_nobody() -> None:
    m = matrix({"a": {}, "b": {"a": F, "c": R, "d": F}, "c": {}, "d": {}})
    [finding] = findings(m)
    assert finding.problem.startswith("b reaches no other node on port 6000 (filtered, refused)")


def test_one_bad_link_one_way() -> None:
    m = matrix({"a": {"b": F}, "b": {}, "c": {}})
    [finding] = findings(m)
    assert finding.problem.startswith("a -> b:6000 filtered (while b -> a is open: a one-way rule)")
    assert finding.links == (("a", "b"),)


def test_128_nodes_one_bad_link_is_named_alone() -> None:
    nodes = [f"node{i:03d}" for i in range(128)]
    rows = {n: {} for n in nodes}
    rows["node017"]["node093"] = F
    found = findings(matrix(rows))
    assert [f.links for f in found] == [(("node017", "node093"),)]


def test_assemble_from_node_answers_with_a_silent_node_and_aliases() -> None:
    def answer(*verdicts: Verdict) -> ProbeReport:
        hosts = ["10.0.0.1", "10.0.0.2", "c"]
        return ProbeReport("h", [ProbeResult(h, 6000, v) for h, v in zip(hosts, verdicts)], "0.0.0.0:6000")

    report = assemble(
        6000,
        ["a", "b", "c"],
        {"a": "10.0.0.1", "b": "10.0.0.2", "c": "c"},
        {"a": answer(OK, F, OK), "b": answer(OK, OK, OK), "c": None},
        {"c": "unreachable: ssh: connect to host c port 22: Connection refused"},
    )
    assert report.matrix.cell("a", "b") == Cell("a", "b", F, "")
    assert report.matrix.cell("c", "a") == Cell("c", "a", None, "")
    assert report.matrix.silent == {"c": "unreachable: ssh: connect to host c port 22: Connection refused"}
    [finding] = report.findings
    assert finding.problem.startswith("a -> b:6000 filtered (while b -> a is open")
    text = render_matrix(report, 5)
    assert "from \\ to" in text and "FILTERED" in text and "c did not run the probes" in text


def test_node_answer_round_trip_and_argv() -> None:
    report = ProbeReport("h", [ProbeResult("10.0.0.2", 6000, F, "10.0.0.2", "never answered within 5s", 5.0)])
    import json

    parsed = parse_answer(json.dumps(dump_document(report)))
    assert parsed == report
    assert parse_answer("not json") is None
    argv = node_argv("/opt/rs", 6000, ["10.0.0.1", "fd00::2"], 5)
    assert argv[:3] == ["/opt/rs", "net", "probe"]
    assert argv[-2:] == ["10.0.0.1:6000", "[fd00::2]:6000"]


@pytest.mark.parametrize(
    "options", [node_options(6000, ["10.0.0.1", "fd00::2", "-odd"], 2.5), ProbeOptions(("a:1",))]
)
def test_the_node_command_line_reads_back_to_the_same_options(options: ProbeOptions) -> None:
    argv = options.to_argv()
    assert argv[:2] == ["net", "probe"]
    with probe_cmd.make_context("probe", argv[2:]) as ctx:
        assert read_probe_options(ctx.params) == options
    assert node_options(6000, ["a"], 5).hold == 66.0  # the window, a second, and a minute for late peers

"""`rankscope stacks --hosts` over real sshd nodes against a real hung 2-node torchrun job (one per worker:
every test of this file reads it, none changes it).

The nodes share this machine's processes, told apart by a stand-in remote rankscope that names each
node's job with --pid: so these runs use the Python node command (--node-python). The sh collector,
which reads /proc itself, is tested on nodes with pid namespaces of their own (test_stacks_shell.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_cli
from tests.support.cluster_fixtures import REMOTE_SETUP, run_via
from tests.support.multinode_job import MultiNodeJob, write_node_dispatch
from tests.support.sshd import Sshd


@pytest.mark.slow
@pytest.mark.parametrize("via", ["ssh", "pdsh"])
def test_stacks_across_nodes_names_the_culprit_and_every_failed_node(
    sshd_nodes: Sshd, pdsh_installed: None, hung_two_node_job: MultiNodeJob, tmp_path: Path, via: str
) -> None:
    dispatch = write_node_dispatch(
        tmp_path / "rankscope-on-node", hung_two_node_job.workdir, missing=["node04"], empty=["node03"]
    )
    result = run_via(
        sshd_nodes, "stacks", "--hosts", "node[01-04],closedport", "--remote-rankscope", str(dispatch), "--node-python",
        "--remote-setup", REMOTE_SETUP, "--node-timeout", "60", "--out", str(tmp_path / "out"),
        via=via, timeout=180,
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 4, out + result.stderr
    assert "2 of 5 nodes (node[01-02])" in out
    assert "4 of 4 processes dumped" in out
    assert "rank 2" in out  # the diagnosis names the deadlocked rank
    failed = out[out.index("Failed (") :]
    assert "closedport [unreachable] ssh: connect to host 127.0.0.1 port" in failed
    assert "Connection refused" in failed and "exit code 255" not in failed  # ssh's words, not pdsh's summary
    assert "node03 [no job found]" in failed
    assert "node04 [no rankscope there]" in failed
    assert (tmp_path / "out" / "node01.out").read_text().lstrip().startswith("{")
    assert (tmp_path / "out" / "stacks.json").exists() and (tmp_path / "out" / "report.txt").exists()


@pytest.mark.slow
def test_stacks_json_merges_ranks_of_all_nodes(
    sshd_nodes: Sshd, hung_two_node_job: MultiNodeJob, tmp_path: Path
) -> None:
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", hung_two_node_job.workdir)
    result = run_via(
        sshd_nodes, "stacks", "--json", "--hosts", "node[01-02]", "--remote-rankscope", str(dispatch), "--node-python",
        "--html", str(tmp_path / "job.html"), timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.stacks/1"
    ranks = {(p["rank"]["host"], p["rank"]["rank"]) for p in document["processes"]}
    assert ranks == {("node01", 0), ("node01", 1), ("node02", 2), ("node02", 3)}
    assert document["diagnosis"]["divergent_ranks"] == [2]
    assert [n["stage"] for n in document["nodes"]] == ["ok", "ok"]
    # Output grows with distinct stacks: 4 ranks, but fewer main-thread groups than ranks.
    assert len([g for g in document["groups"] if g["is_main"]]) < 4
    # --html across nodes (docs/pictures.md): the node-by-rank grid, the culprit outlined.
    page = (tmp_path / "job.html").read_text()
    data = json.loads(page.split('id="rankscope-data">', 1)[1].split("</script>", 1)[0])
    grid = next(s for s in data["sections"] if s["kind"] == "grid")
    assert [(row["node"], [c["rank"] for c in row["cells"]]) for row in grid["rows"]] == [
        ("node01", ["0", "1"]),
        ("node02", ["2", "3"]),
    ]
    assert [c["rank"] for row in grid["rows"] for c in row["cells"] if c["culprit"]] == ["2"]


@pytest.mark.slow
def test_raw_node_answers_give_the_report_whole_documents_give(
    sshd_nodes: Sshd, hung_two_node_job: MultiNodeJob, tmp_path: Path
) -> None:
    """Nodes answer with their raw dumps (rankscope.stacks.node/1); nodes that answer with the whole
    document (an older rankscope: the flag dropped) give the head the same report, text and JSON."""
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", hung_two_node_job.workdir)
    older = tmp_path / "older-rankscope-on-node"
    older.write_text(
        "#!/bin/sh\n"
        'for arg do shift; [ "$arg" = --node-answer ] || set -- "$@" "$arg"; done\n'
        f'exec {dispatch} "$@"\n'
    )
    older.chmod(0o755)
    runs = {}
    for name, remote in (("raw", dispatch), ("whole", older)):
        out = tmp_path / name
        args = [
            "--hosts",
            "node[01-02]",
            "--remote-rankscope",
            str(remote),
            "--out",
            str(out),
            "--node-python",
        ]
        runs[name] = run_via(sshd_nodes, "stacks", "--no-color", *args, timeout=180)
        assert runs[name].returncode == 0, runs[name].stdout + runs[name].stderr
        runs[name + " json"] = json.loads((out / "stacks.json").read_text())
    assert (tmp_path / "raw" / "node01.out").read_text().startswith('{"schema":"rankscope.stacks.node/1"')
    assert json.loads((tmp_path / "whole" / "node01.out").read_text())["schema"] == "rankscope.stacks/1"
    for document in (runs["raw json"], runs["whole json"]):
        document.pop("seconds")
        for status in document["nodes"]:
            status.pop("elapsed")
    assert runs["raw json"] == runs["whole json"]
    texts = [runs[name].stdout.split("\n", 1)[1] for name in ("raw", "whole")]  # past the header's time
    assert texts[0].replace(str(tmp_path / "raw"), "OUT") == texts[1].replace(str(tmp_path / "whole"), "OUT")
    assert "rank 2" in texts[0]


def _without_timing(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "seconds"}


def _report_lines(text: str) -> list[str]:
    """The text report without its first line (the time taken) and the line naming where it was read."""
    return [line for line in text.splitlines()[1:] if not line.startswith("read from ")]


@pytest.mark.slow
def test_multi_node_out_then_from(sshd_nodes: Sshd, hung_two_node_job: MultiNodeJob, tmp_path: Path) -> None:
    """A `--hosts` run keeps each node's answer, not raw dumps: --from re-diagnoses the merged stacks.json."""
    dispatch = write_node_dispatch(tmp_path / "rankscope-on-node", hung_two_node_job.workdir)
    out = tmp_path / "out"
    live = run_via(
        sshd_nodes, "stacks", "--json", "--out", str(out), "--hosts", "node[01-02]",
        "--remote-rankscope", str(dispatch), "--node-python", timeout=180,
    )  # fmt: skip
    assert live.returncode == 0, live.stdout + live.stderr
    assert sorted(p.name for p in out.iterdir()) == ["node01.out", "node02.out", "report.txt", "stacks.json"]
    copy = tmp_path / "elsewhere"
    shutil.copytree(out, copy)
    again = run_cli("stacks", "--from", str(copy), "--json")
    assert again.returncode == 0, again.stderr
    assert _without_timing(again.json()) == _without_timing(live.json())
    assert again.json()["diagnosis"]["divergent_ranks"] == [2]
    text = run_cli("stacks", "--from", str(copy)).stdout
    assert _report_lines(text) == _report_lines((copy / "report.txt").read_text())
    assert text.startswith("rankscope stacks: 2 of 2 nodes (node[01-02]) on node[01-02] — 4 of 4 processes")

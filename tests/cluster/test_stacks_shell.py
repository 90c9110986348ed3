"""`rankscope stacks --hosts` with the POSIX sh collector (rankscope.stacks.shell_node) on nodes that each
have processes of their own: a real hung 2-node torchrun job whose nodes run in pid namespaces of their own
(``unshare --pid --mount-proc``), and one sshd whose sessions enter the namespace of the node they are for
(``ForceCommand nsenter``), so every node's /proc holds its own job only, as on a cluster.

Tools: ssh (sshd), util-linux's unshare and nsenter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import CliResult, run_cli
from tests.support.cluster_fixtures import client_env, via_args
from tests.support.multinode_job import REMOTE_RANKSCOPE, MultiNodeJob, multinode_job
from tests.support.sshd import Sshd, start_sshd
from tests.support.tools import ensure_tools

from rankscope.cluster.classify import NodeResult
from rankscope.cluster.stacks_remote import read_snapshot
from rankscope.model import Stage
from rankscope.stacks.options import StacksOptions
from rankscope.stacks.shell_node import SNAPSHOT_MAGIC

NODES = ["node01", "node02"]
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _ns_init(pid: int, timeout: float = 30.0) -> int:
    """The first process inside the pid namespace ``unshare`` (pid) made: its only child."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise TimeoutError(f"unshare {pid} started nothing")


@pytest.fixture(scope="module")
def ns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sshd, MultiNodeJob, Path]]:
    ensure_tools("ssh", "pidns")
    workdir = tmp_path_factory.mktemp("nsnodes")
    with multinode_job(workdir / "job", NODES, culprit=2, collective_timeout=3600, wrap=UNSHARE) as job:
        cases = []
        for node, launched in zip(NODES, job.jobs):
            cases.append(f"  {node}) t={_ns_init(launched.process.pid)} ;;")
        enter = workdir / "enter-node"
        enter.write_text(
            "#!/bin/sh\n"
            'case "$RANKSCOPE_NODE" in\n' + "\n".join(cases) + "\n  *) exit 97 ;;\nesac\n"
            'exec nsenter --target "$t" --pid --mount -- /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
        )
        enter.chmod(0o755)
        server = start_sshd(workdir / "sshd", NODES, extra=[f"ForceCommand {enter}"])
        try:
            yield server, job, workdir
        finally:
            server.stop()


def _stacks(sshd: Sshd, *args: str, via: str = "ssh") -> CliResult:
    argv = via_args(
        sshd, "stacks", "--hosts", "node[01-02]", "--remote-rankscope", str(REMOTE_RANKSCOPE), *args, via=via
    )
    return run_cli(*argv, env=client_env(), timeout=180)


def _comparable(document: dict[str, Any]) -> dict[str, Any]:
    document = dict(document)
    document.pop("seconds")
    document["nodes"] = [{k: v for k, v in n.items() if k != "elapsed"} for n in document["nodes"]]
    return document


@pytest.mark.slow
@pytest.mark.needs("pidns", "ssh")
@pytest.mark.parametrize("via", ["ssh", "pdsh"])
def test_the_sh_collector_gives_the_report_the_python_node_gives(
    ns_cluster: tuple[Sshd, MultiNodeJob, Path], pdsh_installed: None, tmp_path: Path, via: str
) -> None:
    """pdsh prefixes every line and ends strings at NUL: the answer's records are lines (tr)."""
    sshd, _job, _ = ns_cluster
    shell = _stacks(sshd, "--json", "--out", str(tmp_path / "sh"), via=via)
    python = _stacks(sshd, "--json", "--node-python", "--out", str(tmp_path / "py"))
    assert shell.returncode == 0 and python.returncode == 0, shell.stdout + shell.stderr + python.stderr
    document = shell.json()
    ranks = {(p["rank"]["host"], p["rank"]["rank"]) for p in document["processes"]}
    assert ranks == {("node01", 0), ("node01", 1), ("node02", 2), ("node02", 3)}
    assert document["diagnosis"]["divergent_ranks"] == [2]
    assert _comparable(document) == _comparable(python.json())
    # --out keeps each node's answer as the Python node's JSON, made here from the snapshot.
    assert (tmp_path / "sh" / "node01.out").read_text().startswith('{"schema":"rankscope.stacks.node/1"')
    # Without --out the snapshot is read straight into the report: the same report.
    plain = _stacks(sshd, "--json", via=via)
    assert plain.returncode == 0 and _comparable(plain.json()) == _comparable(document)
    text = _stacks(sshd, "--no-color")
    assert text.returncode == 0 and "rank 2" in text.stdout and "4 of 4 processes dumped" in text.stdout


def test_a_snapshot_cut_short_sends_the_head_to_the_node() -> None:
    """A snapshot without its process table (cut short on the way) is asked again of the node's
    rankscope; an answer that is no snapshot is read as before."""
    cut = NodeResult("n1", Stage.OK, 0, SNAPSHOT_MAGIC + " 00ff /t/r.00ff\n/t/r.00ff.meta:host n\n", "")
    assert read_snapshot(cut, StacksOptions()) == (cut, None, True)
    whole = NodeResult("n1", Stage.OK, 0, '{"schema": "rankscope.stacks/1"}', "")
    assert read_snapshot(whole, StacksOptions()) == (whole, None, False)
    failed = NodeResult("n1", Stage.OK, 127, "", "sh: rankscope: not found")
    assert read_snapshot(failed, StacksOptions()) == (failed, None, False)


def test_the_nodes_a_snapshot_cannot_answer_are_asked_again_with_rankscope_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The orchestration alone (the transport replaced: each node's answer is given): node n2's snapshot
    is cut short, so n2 alone is asked again, with the Python node command, within what is left of the
    run's time; n1's answer (rankscope there handed over: its JSON) is read as it is."""
    from rankscope.cluster import stacks_remote as remote
    from rankscope.cluster.run import ClusterTarget

    python_argv = ["rankscope", "stacks", "--local", "--json", "--node-answer", "--deadline", "20"]
    json_answer = '{"schema": "rankscope.stacks/1", "processes": [], "groups": [], "failures": []}'
    calls: list[tuple[list[str], object, object]] = []

    def fake_run_remote(
        target: ClusterTarget, command: object, progress: object, stop: object, on_result=None
    ):  # type: ignore[no-untyped-def]
        calls.append((target.nodes(), command, target.overall_timeout))
        if len(calls) == 1:
            assert (
                isinstance(command, list)
                and command[:2] == ["sh", "-c"]
                and command[-len(python_argv) :] == python_argv
            )
            results = [
                NodeResult("n1", Stage.OK, 0, json_answer, ""),
                NodeResult(
                    "n2", Stage.OK, 0, SNAPSHOT_MAGIC + " 00ff /t/r.00ff\n/t/r.00ff.meta:host n2\n", ""
                ),
            ]
            return [on_result(r) if on_result else r for r in results]
        return [NodeResult("n2", Stage.OK, 0, json_answer, "")]

    monkeypatch.setattr(remote, "run_remote", fake_run_remote)
    target = ClusterTarget(hosts="n[1-2]", overall_timeout=30.0)
    stacks = remote.stacks_remote(target, python_argv)
    assert [c[0] for c in calls] == [["n1", "n2"], ["n2"]]
    assert calls[1][1] == python_argv and 0 < calls[1][2] <= 30.0  # type: ignore[operator]
    assert [(n.node, n.stage) for n in stacks.nodes] == [("n1", Stage.OK), ("n2", Stage.OK)]
    # --node-python: the command as it is, one connection.
    calls.clear()
    monkeypatch.setattr(
        remote, "run_remote", lambda t, c, p, s, on_result=None: calls.append((t.nodes(), c, None)) or []
    )
    remote.stacks_remote(target, python_argv, shell=False)
    assert calls == [(["n1", "n2"], python_argv, None)]

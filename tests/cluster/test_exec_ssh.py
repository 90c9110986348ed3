"""`rankscope exec` over real sshd "nodes" (host aliases of one sshd on 127.0.0.1), via ssh and pdsh."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.cluster_fixtures import client_env, run_via
from tests.support.sshd import Sshd


@pytest.mark.parametrize("via", ["ssh", "pdsh"])
def test_identical_outputs_fold_into_one_block(sshd_nodes: Sshd, pdsh_installed: None, via: str) -> None:
    result = run_via(sshd_nodes, "exec", "--hosts", "node[01-04]", "--", "echo hello from the node", via=via)
    assert result.returncode == 0, result.stderr
    assert "node[01-04] (4)" in result.stdout
    assert result.stdout.count("hello from the node") == 1
    assert "Failed nodes" not in result.stdout


def test_different_outputs_and_exit_codes_per_node(sshd_nodes: Sshd) -> None:
    # RANKSCOPE_NODE is set per alias by the fixture: the nodes answer differently.
    result = run_via(
        sshd_nodes,
        "exec",
        "--hosts",
        "node[01-04]",
        "--",
        'case "$RANKSCOPE_NODE" in node0[12]) echo even;; *) echo odd; exit 3;; esac',
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert "node[01-02] (2)" in result.stdout
    assert "node[03-04] (2) exit 3" in result.stdout
    assert "node[03-04]  command failed: exit 3" in result.stdout


def test_failure_stages_are_listed_and_partial_results_kept(sshd_nodes: Sshd, tmp_path: Path) -> None:
    result = run_via(
        sshd_nodes,
        "exec",
        "--hosts",
        "node01,badauth,unknownkey,closedport",
        "--out",
        str(tmp_path / "out"),
        "--",
        "hostname",
    )
    assert result.returncode == 4, result.stderr
    out = result.stdout
    assert "node01 (1)" in out
    assert "Failed nodes (3 of 4):" in out
    assert "badauth  auth refused: " in out and "Permission denied" in out
    assert "unknownkey  auth refused: No ED25519 host key is known for rankscope-unknown-key" in out
    assert "closedport  unreachable: " in out and "Connection refused" in out
    assert "--insecure-no-host-key-check" in out  # the hint for a missing host key
    out_dir = tmp_path / "out"
    assert (out_dir / "node01.out").read_text().strip()
    assert "stage: auth refused" in (out_dir / "badauth.err").read_text()
    document = json.loads((out_dir / "exec.json").read_text())
    assert {n["node"]: n["stage"] for n in document["nodes"]} == {
        "node01": "ok",
        "badauth": "auth refused",
        "unknownkey": "auth refused",
        "closedport": "unreachable",
    }
    assert stat.S_IMODE((out_dir / "node01.out").stat().st_mode) == 0o600
    # ssh -v is used to tell how far a login got, but its chatter is not the node's output.
    assert next(n for n in document["nodes"] if n["node"] == "node01")["stderr"] == ""


def test_insecure_flag_is_the_only_way_past_an_unknown_host_key(sshd_nodes: Sshd) -> None:
    result = run_via(
        sshd_nodes, "exec", "--insecure-no-host-key-check", "--hosts", "unknownkey", "--", "echo in"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "unknownkey (1)" in result.stdout


def test_json_and_all_failed_exit_code(sshd_nodes: Sshd) -> None:
    result = run_via(sshd_nodes, "exec", "--json", "--hosts", "closedport,badauth", "--", "true")
    assert result.returncode == 5
    document = result.json()
    assert document["schema"] == "rankscope.exec/1"
    assert sorted((f["nodes"], f["stage"]) for f in document["failures"]) == [
        ("badauth", "auth refused"),
        ("closedport", "unreachable"),
    ]


def test_hostfile_formats(sshd_nodes: Sshd, tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(
        "# DeepSpeed, MPICH and plain lines mixed\nnode01 slots=8\nnode02:8\n\nnode03\nnode01 slots=8\n"
    )
    result = run_via(sshd_nodes, "exec", "--hostfile", str(hostfile), "--", "echo up")
    assert result.returncode == 0, result.stderr
    assert "node[01-03] (3)" in result.stdout


def test_shell_metacharacters_in_node_names_are_never_run(sshd_nodes: Sshd, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    for nodes in (f"node01;touch {canary}", f"$(touch {canary})", "-oProxyCommand=touch " + str(canary)):
        result = run_via(sshd_nodes, "exec", "--hosts", nodes, "--", "true")
        assert result.returncode in (2, 8), result.stdout + result.stderr
        assert result.stderr.startswith("rankscope: error:"), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"node01 slots=8\n`touch {canary}` slots=8\n")
    result = run_cli("exec", "--via", "ssh", "--hostfile", str(hostfile), "--", "true", env=client_env())
    assert result.returncode == 8
    assert "hostfile:2" in result.stderr
    assert not canary.exists()


def test_command_words_reach_the_node_verbatim(sshd_nodes: Sshd, tmp_path: Path) -> None:
    # Several words are quoted one by one: `;` and `$(...)` arrive as text, not as shell code.
    canary = tmp_path / "pwned"
    result = run_via(
        sshd_nodes, "exec", "--hosts", "node01", "--", "echo", f"a; touch {canary}", f"$(touch {canary})"
    )
    assert result.returncode == 0, result.stderr
    assert f"a; touch {canary} $(touch {canary})" in result.stdout
    assert not canary.exists()


def test_garbage_hostfile_and_bad_nodeset_are_one_line_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "hostfile"
    garbage.write_bytes(b"node01 slots=8\nthis is not a host line\n")
    result = run_cli("exec", "--hostfile", str(garbage), "--", "true")
    assert result.returncode == 8
    assert result.stderr.strip().count("\n") == 0 and "hostfile:2" in result.stderr
    result = run_cli("exec", "--hostfile", str(tmp_path / "missing"), "--", "true")
    assert result.returncode == 8 and "cannot read hostfile" in result.stderr
    result = run_cli("exec", "--hosts", "node[1-", "--", "true")
    assert result.returncode == 8 and "cannot read node set" in result.stderr


def test_remote_setup_runs_before_the_command(sshd_nodes: Sshd) -> None:
    result = run_via(
        sshd_nodes,
        "exec",
        "--hosts",
        "node[01-02]",
        "--remote-setup",
        "export GREETING='hello from setup'",
        "--",
        'echo "$GREETING"',
    )
    assert result.returncode == 0, result.stderr
    assert "node[01-02] (2)\n---------------\nhello from setup" in result.stdout


def test_folding_matches_clustershell_clush(sshd_nodes: Sshd) -> None:
    # The same nodes through ClusterShell's own clush -b: the same folded node set and output.
    clush = Path(sys.executable).with_name("clush")
    command = 'case "$RANKSCOPE_NODE" in node0[13]) echo A;; *) echo B;; esac'
    theirs = subprocess.run(
        [str(clush), "-o", f"-F {sshd_nodes.ssh_config}", "-w", "node[01-04]", "-b", command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr
    ours = run_via(sshd_nodes, "exec", "--hosts", "node[01-04]", "--", command)
    assert ours.returncode == 0, ours.stderr
    # Same blocks, same folding, same order: a clush -b user reads rankscope exec without learning anything.
    assert ours.stdout == theirs.stdout
    assert "node[01,03] (2)\n---------------\nA" in ours.stdout

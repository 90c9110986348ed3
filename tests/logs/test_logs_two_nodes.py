"""Two torchrun "nodes" (two agents on this machine, static rendezvous, --role nodeA:/nodeB:)
writing one interleaved console log, as `srun ... torchrun --role $(hostname -s): --tee 3` does.

torchrun's prefix is ``[${role_name}${local_rank}]:``: with --role the number is the local rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.sshd import free_port

from rankscope.demo.launch import LaunchedJob

JOB = Path(__file__).parent / "jobs" / "crash_job.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def two_node_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The console log of two 2-rank torchrun agents (--role nodeA:/nodeB:); global rank 3
    (nodeB's local rank 1) raises a RuntimeError, the others a ValueError."""
    tmp_path = tmp_path_factory.mktemp("twonodes")
    log = tmp_path / "job.log"
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    jobs: list[LaunchedJob] = []
    with open(log, "wb") as out:
        try:
            for node_rank, name in enumerate(["nodeA", "nodeB"]):
                argv = [
                    sys.executable, "-m", "torch.distributed.run",
                    "--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "2",
                    "--master-addr", "127.0.0.1", "--master-port", str(port),
                    "--role", f"{name}:", "--tee", "3",
                    str(JOB), "--odd-rank", "3",
                ]  # fmt: skip
                process = subprocess.Popen(
                    argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
                jobs.append(LaunchedJob(process=process, workdir=tmp_path, nproc=2, log_path=log))
            codes = [job.process.wait(240) for job in jobs]
        finally:
            for job in jobs:
                job.stop()
    assert all(code != 0 for code in codes), log.read_text(errors="replace")[-3000:]
    return log


def test_errors_fold_global_ranks_over_two_hosts(two_node_log: Path) -> None:
    log = two_node_log
    data = run_cli("logs", "errors", str(log), "--json").json()
    groups = [(g["exception_type"], g["ranks"], g["hosts"]) for g in data["groups"]]
    # torchrun's --role prefix carries the LOCAL rank: global rank 3 is nodeB's local rank 1
    assert groups == [
        ("ValueError", "nodeA:[0-1] nodeB:0", "nodeA,nodeB"),
        ("RuntimeError", "nodeB:1", "nodeB"),
    ]
    # torch's own [rankN]: marker on the traceback lines gives the global ranks back
    assert [g["global_ranks"] for g in data["groups"]] == ["0-2", "3"]
    text = run_cli("logs", "errors", str(log)).stdout
    assert "error 2 of 2 — culprit, 1 rank(s): nodeB:1 (torch global rank 3)" in text
    ranks = run_cli("logs", "ranks", str(log), "--json").json()
    assert [r["label"] for r in ranks["ranks"]] == [f"node{n}:{r}" for n in "AB" for r in range(2)]


def test_grep_bare_rank_is_the_global_rank(two_node_log: Path) -> None:
    """`--rank 3` is global rank 3 (torch's [rank3]: markers are on nodeB:1's traceback), all of
    its lines, its ordinary prints too; `--rank nodeB:1` is the label as written."""
    log = two_node_log
    by_global = run_cli("logs", "grep", "--rank", "3", str(log))
    assert by_global.returncode == 0, by_global.stderr
    assert "rank 3 = [nodeB:1] (global rank from torch's [rank3]: markers)" in by_global.stderr
    lines = by_global.stdout.splitlines()
    assert "rank 3: all_reduce gave 4.0" in lines  # printed before the traceback, without a marker
    assert "RuntimeError: gradient for layer 7 is not finite on rank 3" in lines
    assert not [line for line in lines if "ValueError" in line or "on rank 1" in line]
    by_label = run_cli("logs", "grep", "--rank", "nodeB:1", str(log))
    assert by_label.stdout == by_global.stdout and "global rank" not in by_label.stderr
    local = run_cli("logs", "grep", "--rank", "nodeA:1", str(log)).stdout
    assert "rank 1: all_reduce gave 4.0" in local.splitlines()
    # from stdin (read once) the number is the label as written: nothing is labelled "3"
    piped = run_cli("logs", "grep", "--rank", "3", "-", input=log.read_text(errors="replace"))
    assert piped.returncode == 3 and piped.stdout == ""


def test_grep_json_is_one_document_with_file_lines(two_node_log: Path) -> None:
    log = two_node_log
    result = run_cli("logs", "grep", "--rank", "3", "--rank", "nodeA:0", str(log), "--json")
    assert result.returncode == 0 and result.stderr == ""  # how it matched is in the document
    data = result.json()
    assert data["schema"] == "rankscope.logs.grep/1"
    assert data["ranks"] == ["3", "nodeA:0"]
    assert data["matched"] == ["rank 3 = [nodeB:1] (global rank from torch's [rank3]: markers)"]
    assert data["found"] == len(data["lines"]) > 0
    assert {(row["label"], row["rank"], row["global_rank"]) for row in data["lines"]} == {
        ("nodeB:1", 1, 3),
        ("nodeA:0", 0, None),
    }
    file_lines = log.read_bytes().split(b"\n")
    for row in data["lines"]:
        assert row["file"] == str(log) and not row["continued"]
        assert file_lines[row["line"] - 1].decode().endswith(row["text"]), row
    text = run_cli("logs", "grep", "--rank", "3", "--rank", "nodeA:0", str(log)).stdout
    assert text.splitlines() == [row["text"] for row in data["lines"]]
    assert data["read"]["sources"] == [str(log)]


def test_every_verb_counts_the_same_lines_without_a_rank_prefix(two_node_log: Path, tmp_path: Path) -> None:
    """`ranks`, `split` and `errors` count lines without a rank prefix by one definition: blank
    lines, torchrun's own lines, a torch C++ warning's "[W...]", a lone "[3]:", cut long lines."""
    from rankscope.logs.prefixes import PLAIN
    from rankscope.logs.sources import MAX_LINE

    log = tmp_path / "messy.log"
    original = two_node_log.read_bytes()
    assert b"torch.distributed" in original  # torchrun's own (unprefixed) lines are in it
    log.write_bytes(
        original
        + b"\n\n[W1123 01:02:03.456 socket.cpp:752] [c10d] The client socket has failed to connect\n"
        + b"[3]:\n"
        + b"x" * (MAX_LINE + 100)
        + b"\n"  # a line without a prefix, cut in two pieces
        + b"[nodeA:1]:"
        + b"y" * (MAX_LINE + 100)
        + b"\n"  # a rank's line, cut
        + b"[nodeB:1]:last\n"
    )
    expected = sum(1 for label, _ in PLAIN.lines(log.read_bytes()) if label is None)
    assert expected > 10
    ranks = run_cli("logs", "ranks", str(log), "--json").json()
    errors = run_cli("logs", "errors", str(log), "--json").json()
    split = run_cli("logs", "split", str(log), "--out", str(tmp_path / "split"), "--json").json()
    unprefixed = [row["lines"] for row in split["files"] if row["label"] is None]
    # the cut lines are counted once each, not once per piece
    assert ranks["unprefixed_lines"] == errors["unprefixed_lines"] == unprefixed[0] == expected
    assert ranks["lines"] == errors["lines"]
    assert len((tmp_path / "split" / "unprefixed.log").read_bytes().split(b"\n")) - 1 == expected
    text = run_cli("logs", "ranks", str(log)).stdout
    assert f"(no rank prefix)  {expected:>10} lines" in text

"""A node whose ranks all finished while another node's ranks failed only as victims: torchrun's
agent on the finished node is the lead (rankscope.logs.finished). A real 2-node torchrun job on
127.0.0.1, and the INFO-level wording of another torch version written from its facts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import run_cli, run_cli_here
from tests.support.leftovers import kill_marked, marked_env, wait_for
from tests.support.sshd import free_port


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


JOB = Path(__file__).with_name("jobs") / "early_return_job.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
LEAD = "reported its worker group finished (every rank there exited 0"


@pytest.mark.slow
def test_the_node_whose_rank_returned_early_is_the_lead(tmp_path: Path) -> None:
    """Node 1's rank returns before the last barrier; node 0's rank fails with a peer lost, a victim. Node B's torchrun only says "Error waiting on exit barrier" (torch 2.13's
    default level), after its workers all exited 0: `why` and `logs errors` name it as the lead
    (they said only that the rank that ended first left no error)."""
    pytest.importorskip("torch.distributed")
    port = str(free_port())
    env, mark = marked_env(OMP_NUM_THREADS="1")
    nodes = []
    try:
        for node in ("0", "1"):
            argv = [str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
            argv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "early", "--tee", "3", str(JOB)]
            with open(tmp_path / f"node{node}.log", "wb") as out:
                nodes.append(
                    subprocess.Popen(
                        argv,
                        cwd=tmp_path,
                        env={**env, "EARLY": node},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            if node == "0":  # its torchrun holds the store: the finished node's waits at the exit barrier
                wait_for(lambda: _listening(int(port)), 120, "the rendezvous store")
        codes = sorted(node.wait(180) for node in nodes)
    finally:
        kill_marked(mark)
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    logs = sorted(tmp_path.glob("node*.log"))
    text = {log.name: log.read_text(errors="replace") for log in logs}
    assert codes[0] == 0 and codes[1] != 0, text  # one node finished, the other failed
    finished = "node1.log"
    # rank 0's barrier lost its peer: "Connection closed by peer" or "Read error ... reset by peer"
    assert "done" in text[finished] and "by peer" in text["node0.log"], text
    report = run_cli("logs", "errors", *map(str, logs))
    assert f"lead: torchrun whose output is {tmp_path / finished} {LEAD}" in report.stdout, report.stdout
    why = run_cli_here("why", *[w for log in logs for w in ("--log", str(log))], "--json").json()
    assert LEAD in str(why["notes"]) or LEAD in str(why.get("verdict")), why


INFO_LEVEL = """\
[rank1]:{'train_runtime': 2381.6, 'train_loss': 1.612, 'epoch': 3.0}
I0412 21:44:51.904000 3820 torch/distributed/elastic/agent/server/api.py:879] [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.
I0412 21:44:51.905000 3820 torch/distributed/elastic/agent/server/api.py:932] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish
"""
VICTIM = """\
[rank0]:Traceback (most recent call last):
[rank0]:  File "/srv/tune/train.py", line 241, in main
[rank0]:    trainer.save_model()
[rank0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4113
"""


def test_info_level_words_are_the_lead_only_where_every_error_is_a_victim_s(tmp_path: Path) -> None:
    """torchrun at LOGLEVEL=INFO says it in so many words (once per node, both lines); where any rank
    has an error of its own, that error is the verdict and no lead is told."""
    finished, failed = tmp_path / "b.log", tmp_path / "a.log"
    finished.write_text(INFO_LEVEL)
    failed.write_text(VICTIM)
    report = run_cli("logs", "errors", str(failed), str(finished), "--json").json()
    mine = [f for f in report["findings"] if f["cause"] == "workers_finished"]
    assert len(mine) == 1 and mine[0]["role"] == "handled" and mine[0]["line"] == 2, mine
    text = run_cli("logs", "errors", str(failed), str(finished)).stdout
    assert f"lead: torchrun whose output is {finished} {LEAD}" in text, text
    failed.write_text(VICTIM.rsplit("RuntimeError", 1)[0] + "ValueError: shard 7 has no rows\n")
    assert "lead:" not in run_cli("logs", "errors", str(failed), str(finished)).stdout


CORPUS = Path(__file__).with_name("corpus") / "logs"


@pytest.mark.parametrize(
    ("log", "rank", "stopped"),
    [
        ("recorded_torchrun_one_rank_exit0.log", 1, 0),
        ("recorded_torchrun_exit0_stopped_peer_wrote.log", 0, 1),
    ],
)
def test_a_local_rank_missing_from_the_failure_summary_had_exited_0(
    log: str, rank: int, stopped: int
) -> None:
    """Real 3-rank jobs whose one rank exits 0 before a collective: torchrun's summary lists every
    worker it saw fail or stopped, so the local rank it leaves out had exited 0: the lead (it said
    only "the rank that ended first left no error"). The rank torchrun stopped after it printed its
    own lost-peer traceback is not called "still running ... wrote no error" (it was)."""
    text = run_cli("logs", "errors", str(CORPUS / log)).stdout
    assert f"lead: rank {rank} is not in torchrun's failure summary" in text, text
    assert "still running" not in text, text
    why = run_cli_here("why", "--log", str(CORPUS / log), "--json").json()
    assert f"rank {rank} is not in torchrun's failure summary" in str(why), why
    assert f"rank {stopped} was still running" not in str(why)


def test_the_missing_local_ranks_of_each_node_and_their_global_ranks() -> None:
    from rankscope.logs.finished import left_findings
    from rankscope.logs.torchrun_summary import RankExit

    exits = [
        RankExit(5, "n1", 1, None, True, local_rank=1),
        RankExit(7, "n1", -15, "SIGTERM", False, local_rank=3),
        RankExit(8, "n2", 1, None, False, local_rank=0),
    ]
    found = [(f.global_rank, f.who) for f in left_findings(exits)]
    assert found == [(4, "4"), (6, "6")]  # n1's local ranks 0 and 2; n2 lists its only one
    assert left_findings([RankExit(3, "n1", 1, None, True)]) == []  # no local ranks: nothing to tell
    odd = [RankExit(5, "n1", 1, None, True, local_rank=1), RankExit(9, "n1", 1, None, False, local_rank=2)]
    assert [(f.global_rank, f.who) for f in left_findings(odd)] == [(None, "0")]  # offsets disagree

"""`--job` on a real hung 2-rank torchrun gloo job: the ranks' TCP connections to each other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job

from rankscope.demo.launch import LaunchedJob


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedJob]:
    """Rank 1 deadlocks on its own lock; rank 0 waits for it in all_reduce."""
    with torchrun_job(tmp_path_factory.mktemp("gloo"), "--scenario", "lock", "--culprit", "1") as job:
        yield job


def test_fds_job_lists_the_gloo_sockets_between_the_ranks(gloo_job: LaunchedJob) -> None:
    result = run_cli("fds", "--job", "--json")
    assert result.returncode in (0, 4), (
        result.stderr
    )  # 4: a rank of another job on this node exited meanwhile
    # --job covers every job on the node (other jobs may run here too): this job's ranks.
    processes = {
        process["rank"]["rank"]: process
        for process in result.json()["processes"]
        if process["pid"] in gloo_job.worker_pids()
    }
    assert set(processes) == {0, 1}

    def connections(rank: int) -> set[tuple[str, str]]:
        return {
            (fd["local"], fd["peer"])
            for fd in processes[rank]["fds"]
            if fd["kind"] == "socket" and fd.get("state") == "ESTABLISHED"
        }

    # A gloo connection seen from both ends: rank 0's (local, peer) is rank 1's (peer, local).
    between = connections(0) & {(peer, local) for local, peer in connections(1)}
    assert between, (connections(0), connections(1))

    # The launcher's pid stands for its ranks.
    text = run_cli("fds", str(gloo_job.pid)).stdout
    assert text.count("descriptors (limit") == 2 and ":0): " in text and ":1): " in text


@pytest.mark.needs("strace")
def test_strace_of_the_launcher_traces_every_rank_at_once_and_leaves_them_running(
    gloo_job: LaunchedJob,
) -> None:
    # The launcher's pid rather than --job: --job would also trace the jobs of others on this node.
    # 3 s, not 1: on a loaded machine attaching to every thread of two torch processes can take most
    # of a 1 s window, and a rank's gloo thread was once seen with no call in it at all.
    result = run_cli("strace", str(gloo_job.pid), "--seconds", "3", "--json")
    assert result.returncode == 0, result.stderr
    processes = result.json()["processes"]
    assert sorted(process["rank"]["rank"] for process in processes) == [0, 1]
    for process in processes:
        assert process["threads"] >= 2 and process["blocked"]
        assert process["state_after"] not in ("T", "t", "gone")
    # Each rank's gloo thread waits in epoll_wait on its connection to the other rank. The
    # launcher's pid again: with --job, another job's rank 0 could stand in for this one's.
    fds = {
        process["rank"]["rank"]: process
        for process in run_cli("fds", str(gloo_job.pid), "--json").json()["processes"]
    }
    for process in processes:
        rank = process["rank"]["rank"]
        other = {fd["local"] for fd in fds[1 - rank]["fds"] if fd["kind"] == "socket" and fd.get("local")}
        waits = [blocked["on"] for blocked in process["blocked"] if blocked["syscall"].startswith("epoll")]
        assert any(f"-> {address} ESTABLISHED" in on for on in waits for address in other), (
            rank,
            waits,
            other,
        )

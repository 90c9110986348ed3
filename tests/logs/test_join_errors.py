"""Ranks that never arrived: the forms torch prints, read into who did not come (rankscope.logs.join_errors),
and what `logs errors` then says about the ranks that printed them. The corpus holds whole logs of
each (tests/logs/corpus/cases.toml); these pin the message forms and the counting rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli_here

from rankscope.logs.join_errors import (
    MONITORED_BARRIER,
    NCCL_ID_WAIT,
    NEVER_JOINED,
    STORE_UNREACHABLE,
    Join,
    parse,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
            "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
            Join(NEVER_JOINED, 3, 8, 4, waited="0:30:00"),
        ),
        (
            "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on "
            "rank 5, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=16, timeout=0:30:00 "
            "error=Wait timeout)",
            Join(NEVER_JOINED, 5, 8, 16, waited="0:30:00"),
        ),
        (
            "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 7/8 clients joined.",
            Join(NEVER_JOINED, None, 8, 7, waited="1801 seconds"),
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
            "connect to (10.1.0.4, 29500).",
            Join(STORE_UNREACHABLE, waited="600000ms", endpoint="10.1.0.4:29500"),
        ),
        (
            "TimeoutError: The client socket has timed out after 1800s while trying to connect to (node-0, 23456).",
            Join(STORE_UNREACHABLE, waited="1800s", endpoint="node-0:23456"),
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has failed to connect to any network address "
            "of (master.cluster.local, 29500).",
            Join(STORE_UNREACHABLE, endpoint="master.cluster.local:29500"),
        ),
        (
            "RuntimeError: [Rank 0]: Ranks 1, 2, 7 failed to pass monitoredBarrier in 60000 ms",
            Join(MONITORED_BARRIER, 0, missing=(1, 2, 7), waited="60000 ms"),
        ),
        (
            "[E522 18:03:19.442177028 ProcessGroupGloo.cpp:143] [Rank 0]: Rank 4 failed to pass monitoredBarrier in 2000 ms",
            Join(MONITORED_BARRIER, 0, missing=(4,), waited="2000 ms"),
        ),
        (
            "RuntimeError: [5] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d "
            "key-value store by key '0', but store->get('0') got error: Socket Timeout",
            Join(NCCL_ID_WAIT, 5, missing=(0,)),
        ),
        (
            "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
            "from [1] via c10d key-value store by key '1', but store->get('1') got error: wait timeout",
            Join(NCCL_ID_WAIT, 3, missing=(1,)),
        ),
    ],
)
def test_each_form_says_who_waited_and_for_whom(text: str, expected: Join) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
        "send/recv from rank 0. Please check rank 0 logs for faulty rank.",
        "[W TCPStore.cpp:340] [c10d] TCP client failed to connect/validate to host 10.1.0.4:29500 - retrying",
        "INFO Rank 3: Completed store-based barrier for key:store_based_barrier_key:1 with 8 nodes.",
        "RuntimeError: Timed out waiting 1800000ms for recv operation to complete",
    ],
)
def test_other_lines_are_not_these_failures(text: str) -> None:
    assert parse(text) is None


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def _traceback(rank: int, exception: str) -> list[str]:
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/srv/train.py", line 20, in <module>',
        f"[rank{rank}]:     dist.init_process_group('nccl')",
        f"[rank{rank}]: {exception}",
    ]


def _barrier(rank: int, joined: int) -> str:
    return (
        f"RuntimeError: Timed out initializing process group in store based barrier on rank: {rank}, for key: "
        f"store_based_barrier_key:1 (world_size=4, worker_count={joined}, timeout=0:30:00)"
    )


def test_the_ranks_that_never_joined_are_named_only_when_every_one_that_did_printed(tmp_path: Path) -> None:
    # ranks 0 and 2 joined and printed; the count says 2 of 4: ranks 1 and 3 never came
    log = _log(tmp_path, _traceback(0, _barrier(0, 2)) + _traceback(2, _barrier(2, 2)))
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["ranks"], verdict["who"]) == (NEVER_JOINED, "1,3", None)
    text = run_cli_here("logs", "errors", str(log)).stdout
    assert text.splitlines()[0].startswith(
        "root cause: only 2 of 4 ranks reached init_process_group's store-based barrier within 0:30:00; "
        "2 never did: ranks 1,3"
    )
    # three joined, one of them printed here (a paste of one node): which one is missing is not known
    partial = _log(tmp_path, _traceback(0, _barrier(0, 3)))
    verdict = run_cli_here("logs", "errors", str(partial), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["ranks"], verdict["who"]) == (NEVER_JOINED, None, None)
    assert "1 never did" in verdict["what"]


def test_the_ranks_that_reached_the_monitored_barrier_are_victims_of_the_ones_rank_0_names(
    tmp_path: Path,
) -> None:
    reached = (
        "RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
        "send/recv from rank 0. Please check rank 0 logs for faulty rank."
    )
    failed = "RuntimeError: [Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms"
    log = _log(tmp_path, _traceback(1, reached) + _traceback(0, failed))
    data = run_cli_here("logs", "errors", str(log), "--json").json()
    assert (data["verdict"]["who"], data["verdict"]["cause"]) == ("3", MONITORED_BARRIER)
    roles = {tuple(group["labels"]): group["role"] for group in data["groups"]}
    assert roles[("1",)] == "victim"
    first = run_cli_here("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith(
        "root cause: rank 3: did not reach monitored_barrier within 30000 ms: rank 0 waited"
    )


WAIT = "torch.distributed.DistStoreError: wait timeout after 4000ms, keys: /default_pg/0//cpu//0/2"


SUMMARY = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "Failures:",
    "[1]:",
    "  rank      : 2 (local_rank: 2)",
    "  exitcode  : -15 (pid: 4412)",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : 1 (pid: 4410)",
    "[2]:",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : 1 (pid: 4411)",
]


def test_a_store_wait_names_the_rank_that_never_wrote_its_key_only_when_the_summary_lists_it(
    tmp_path: Path,
) -> None:
    waits = _traceback(0, WAIT) + _traceback(1, WAIT)
    alone = run_cli_here("logs", "errors", str(_log(tmp_path, waits)), "--json").json()
    assert alone["verdict"] is None  # who else the job had is not in the log: victims, no rank to blame
    verdict = run_cli_here("logs", "errors", str(_log(tmp_path, waits + SUMMARY)), "--json").json()["verdict"]
    assert (verdict["who"], verdict["cause"], verdict["ranks"], verdict["kind"]) == (
        "2",
        NEVER_JOINED,
        "2",
        "watchdog",
    )
    assert verdict["what"].startswith(
        "ranks 0-1 timed out after 4000 ms waiting in the store for a key rank 2 never wrote"
    )


def test_a_store_that_cannot_be_reached_gives_way_to_the_death_of_its_host(tmp_path: Path) -> None:
    # rank 0 (the store's host) crashed first; rank 1 then could not reach its store: rank 0 is the cause
    crash = _traceback(0, "ModuleNotFoundError: No module named 'flash_attn'")
    unreachable = _traceback(
        1,
        "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to "
        "connect to (10.0.0.1, 29500).",
    )
    log = _log(tmp_path, unreachable + crash)  # the timeout printed first, as a paste of two nodes can
    verdict = run_cli_here("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["who"], verdict["cause"]) == ("0", "python_exception")
    alone = _log(tmp_path, unreachable)
    verdict = run_cli_here("logs", "errors", str(alone), "--json").json()["verdict"]
    assert (verdict["who"], verdict["cause"]) == ("1", STORE_UNREACHABLE)
    assert (
        "10.0.0.1:29500" in verdict["what"] and "rankscope net probe 10.0.0.1:29500" in verdict["next_step"]
    )

"""Pure: strace output read into counts, blocked calls and failures, on recorded lines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from rankscope.inspect.fdkinds import classify, parse_inet_table
from rankscope.inspect.report import FdKind, OpenFd
from rankscope.inspect.syscalls import describe_restart, sockaddr_of, summarise, target_of

DATA = Path(__file__).parent.parent / "data" / "strace"
#: One thread per blocking call, and a main thread failing connect() to a closed port (strace 6.1).
THREADS = (DATA / "threads.txt").read_text().splitlines()
#: write() to /dev/full and open() of a missing path, in a loop.
FAILING = (DATA / "failing.txt").read_text().splitlines()

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:BC1A 0100007F:E09D 01 00000000:00000000 00:00000000 00000000     0        0 1535090 1 0000000078 20 4 30 10 -1
"""


def _fds() -> dict[int, OpenFd]:
    sockets = parse_inet_table("tcp", TCP)
    entries = [
        classify(3, "pipe:[99]", [], {}),
        classify(6, "socket:[1535090]", [], sockets),
        classify(7, "anon_inode:[eventpoll]", ["tfd:        6 events:       19 data: 6"], {}),
    ]
    return {entry.fd: entry for entry in entries}


def test_unfinished_calls_at_the_end_are_what_each_thread_is_blocked_on() -> None:
    summary = summarise(THREADS, _fds())
    blocked = {entry.tid: entry for entry in summary.blocked}
    assert summary.threads == 5 and summary.lines == 13
    assert blocked[15654].syscall == "epoll_wait"
    assert blocked[15654].on == "fd 6: tcp 127.0.0.1:48154 -> 127.0.0.1:57501 ESTABLISHED"
    assert blocked[15653].syscall == "read" and blocked[15653].on == "fd 3: pipe:[99]"
    assert blocked[15652].syscall == "futex" and "lock or condition" in blocked[15652].on
    # strace's "resuming interrupted read" names an earlier call, not the one resumed: not repeated.
    assert "interrupted read" not in blocked[15655].on and "which call is not known" in blocked[15655].on
    # The main thread was in clock_nanosleep when strace detached.
    assert blocked[15610].syscall == "clock_nanosleep" and blocked[15610].on == "sleeping"
    # Waited: from each call's start to the last line (01:50:20.682655).
    assert round(blocked[15654].waited, 3) == round(20.682655 - 20.179167, 3)


def test_failures_are_grouped_by_errno_with_their_addresses() -> None:
    summary = summarise(THREADS)
    (refused,) = summary.failures
    assert (refused.errno, refused.message, refused.count) == ("ECONNREFUSED", "Connection refused", 2)
    assert refused.syscalls == {"connect": 2} and refused.targets == ("127.0.0.1:1",)
    counts = {count.name: count for count in summary.syscalls}
    assert counts["connect"].calls == 2 and counts["connect"].errors == 2
    assert counts["close"].calls == 2 and counts["close"].errors == 0
    # By time spent: the sleeps first.
    assert summary.syscalls[0].name == "clock_nanosleep"


def test_padded_results_and_paths_of_file_calls() -> None:
    dev_full = classify(3, "/dev/full", ["flags:\t01"], {})
    summary = summarise(FAILING, {3: dev_full})
    groups = {group.errno: group for group in summary.failures}
    assert groups["ENOSPC"].count == 2 and groups["ENOSPC"].targets == ("fd 3: /dev/full",)
    assert groups["ENOENT"].targets == ("/nonexistent/rankscope-missing.txt",)
    assert groups["ENOENT"].syscalls == {"openat": 2}


def test_resumed_calls_join_their_start_and_routine_errors_are_noise() -> None:
    lines = [
        "200 10:00:00.000000 futex(0x1, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>",
        "201 10:00:00.100000 recvfrom(5, 0x7f, 4, MSG_DONTWAIT, NULL, NULL) = -1 EAGAIN (Resource temporarily unavailable) <0.000004>",
        "200 10:00:00.500000 <... futex resumed>) = -1 ETIMEDOUT (Connection timed out) <0.500000>",
        '201 10:00:00.600000 unlink("/dev/shm/nccl-x") = -1 EACCES (Permission denied) <0.000010>',
        "201 10:00:00.700000 +++ exited with 0 +++",
    ]
    summary = summarise(lines)
    assert summary.blocked == []
    counts = {count.name: count for count in summary.syscalls}
    assert counts["futex"].calls == 1 and counts["futex"].seconds == 0.5
    groups = [(group.errno, group.noise) for group in summary.failures]
    assert groups == [("EACCES", False), ("EAGAIN", True), ("ETIMEDOUT", True)]
    assert summary.failures[0].targets == ("/dev/shm/nccl-x",)


def test_a_call_still_running_at_detach_waits_until_tracing_ended() -> None:
    lines = ["300 10:00:00.000000 poll([{fd=6, events=POLLIN}], 1, -1 <detached ...>"]
    (blocked,) = summarise(lines, _fds(), ended_at=36005.0).blocked
    assert blocked.syscall == "poll" and blocked.waited == 5.0
    assert blocked.on.startswith("fd 6: tcp 127.0.0.1:48154 -> 127.0.0.1:57501")


def test_addresses_and_targets() -> None:
    v6 = '{sa_family=AF_INET6, sin6_port=htons(29500), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}'
    assert sockaddr_of(v6) == "[::1]:29500"
    assert sockaddr_of('{sa_family=AF_UNIX, sun_path="/run/x.sock"}') == 'unix "/run/x.sock"'
    assert target_of("openat", 'AT_FDCWD, "/data/x", O_RDONLY', {}) == "/data/x"
    assert target_of("write", '9, "abc", 3', {}) == "fd 9"
    assert target_of("getpid", "", {}) is None
    assert _fds()[3].kind == FdKind.PIPE


@pytest.mark.parametrize(
    ("wchan", "words"),
    [
        ("futex_do_wait", "a futex wait with a timeout"),
        ("futex_wait_queue", "a futex wait with a timeout"),
        ("hrtimer_nanosleep", "a sleep (nanosleep)"),
        ("do_sys_poll", "poll with a timeout"),
        ("ep_poll", "epoll_wait with a timeout"),
        ("some_driver_wait", "which call is not known (kernel wait channel some_driver_wait)"),
        ("0", "which call is not known"),
        (None, "which call is not known"),
    ],
)
def test_a_restarted_call_is_named_by_the_kernel_wait_channel(wchan: Optional[str], words: str) -> None:
    text = describe_restart(wchan)
    assert words in text and "restart_syscall" in text


def test_a_thread_polling_with_a_timeout_is_waiting_even_between_two_calls() -> None:
    # gloo's event loop: epoll_wait with a 10 ms timeout, again and again, each returning 0. When
    # tracing stopped the thread was between two calls (nothing unfinished); another thread made
    # one call that timed out once, which is no wait; a third polled a different fd each time.
    lines = [
        "700 10:00:00.000000 epoll_wait(7, [], 64, 10) = 0 <0.010100>",
        "701 10:00:00.001000 poll([{fd=3, events=POLLIN}], 1, 5) = 0 (Timeout) <0.005100>",
        "700 10:00:00.010200 epoll_wait(7, [], 64, 10) = 0 <0.010100>",
        "702 10:00:00.010300 epoll_wait(7, [], 64, 10) = 0 <0.010000>",
        "702 10:00:00.020400 epoll_wait(9, [], 64, 10) = 0 <0.010000>",
        "700 10:00:00.020400 epoll_wait(7, [], 64, 10) = 0 <0.010100>",
        '701 10:00:00.021000 write(1, "x", 1) = 1 <0.000010>',
        "700 10:00:00.030600 epoll_wait(7, [{events=EPOLLIN, data={u32=6, u64=6}}], 64, 10) = 1 <0.000100>",
        "700 10:00:00.030800 epoll_wait(7, [], 64, 10) = 0 <0.010100>",
        "700 10:00:00.041000 epoll_wait(7, [], 64, 10) = 0 <0.010100>",
        "703 10:00:00.045000 futex(0x7f00, FUTEX_WAIT_BITSET_PRIVATE, 0, {tv_sec=1, tv_nsec=0}, FUTEX_BITSET_MATCH_ANY) = -1 ETIMEDOUT (Connection timed out) <0.010000>",
        "703 10:00:00.055100 futex(0x7f00, FUTEX_WAIT_BITSET_PRIVATE, 0, {tv_sec=1, tv_nsec=0}, FUTEX_BITSET_MATCH_ANY) = -1 ETIMEDOUT (Connection timed out) <0.010000>",
    ]
    summary = summarise(lines, _fds(), ended_at=36000.060)
    blocked = {entry.tid: entry for entry in summary.blocked}
    # The run that counts starts after the one call that returned an event.
    assert blocked[700].syscall == "epoll_wait" and blocked[700].polls == 2
    assert blocked[700].on == "fd 6: tcp 127.0.0.1:48154 -> 127.0.0.1:57501 ESTABLISHED"
    assert round(blocked[700].waited, 3) == 0.029
    assert blocked[703].syscall == "futex" and blocked[703].polls == 2
    # One timeout then other work; waits on two different descriptors: neither is a polling wait.
    assert 701 not in blocked and 702 not in blocked

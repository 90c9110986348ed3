"""Pure: the words of the fds summary (the open-files limit) and of a trace."""

from __future__ import annotations

from rankscope.inspect.fdkinds import classify, counts_of
from rankscope.inspect.render import render_fds, render_strace
from rankscope.inspect.report import (
    Blocked,
    FailureGroup,
    FdsReport,
    ProcessFds,
    ProcessTrace,
    StraceReport,
    SyscallCount,
)
from rankscope.model import Failure, FailureKind, RankId, Stage


def _process(open_fds: int, soft: int) -> ProcessFds:
    fds = tuple(
        classify(fd, f"/data/shard-{fd}", ["pos:\t0", "flags:\t0100000"], {}) for fd in range(open_fds)
    )
    return ProcessFds(42, "python train.py", fds, counts_of(fds), soft, None, RankId("node1", 3))


def test_near_the_open_files_limit_is_a_warning_with_the_fix() -> None:
    text = render_fds(FdsReport((_process(95, 100),)))
    lines = text.splitlines()
    assert lines[0] == "pid 42 (rank node1:3): python train.py"
    assert lines[1] == "  95 descriptors (limit 100 soft / unlimited hard): 95 file"
    assert lines[2].startswith("  WARNING: 95 of 100 open files") and "ulimit -n" in lines[2]
    assert "WARNING" not in render_fds(FdsReport((_process(80, 100),)))


def test_failed_processes_are_listed_after_the_others() -> None:
    failure = Failure("pid 7", Stage.DISCOVER, "no process 7", "check the pid", None, FailureKind.GONE)
    text = render_fds(FdsReport((_process(1, 100),), (failure,)))
    assert text.rstrip().splitlines()[-1] == "FAILED pid 7: no process 7 (check the pid)"


def test_a_trace_reads_blocked_then_findings_then_noise_then_the_table() -> None:
    trace = ProcessTrace(
        pid=42,
        command="python train.py",
        seconds=2.0,
        threads=3,
        syscalls=tuple(SyscallCount(f"call{i}", 12 - i, 0, 1.0 / (i + 1)) for i in range(12)),
        blocked=(Blocked(43, "recvfrom", "8, ", 2.0, "fd 8: tcp 10.0.0.1:5 -> 10.0.0.2:29500 ESTABLISHED"),),
        failures=(
            FailureGroup("ECONNREFUSED", "Connection refused", 4, {"connect": 4}, ("10.0.0.1:29500",)),
            FailureGroup("EAGAIN", "Resource temporarily unavailable", 900, {"recvfrom": 900}, (), True),
        ),
        state_after="S",
    )
    text = render_strace(StraceReport((trace,)))
    order = [text.index(mark) for mark in ("blocked now", "ECONNREFUSED", "routine errors", "SYSCALL")]
    assert order == sorted(order)
    assert "thread 43: recvfrom for >= 2.0 s -- fd 8: tcp 10.0.0.1:5 -> 10.0.0.2:29500 ESTABLISHED" in text
    assert "routine errors (not findings): EAGAIN x900" in text
    assert "... 2 more (--json has them all)" in text

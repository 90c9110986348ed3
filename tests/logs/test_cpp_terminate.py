"""A C++ exception nothing caught (``terminate called after throwing an instance of 'T'`` and its
``what():`` line): the reason of the SIGABRT its launcher reports, and that rank's when the
launcher names one aborted process; a victim when its message says a peer or the watchdog ended
it. Logs written here in the form libstdc++ and torch print (torchrun without --tee: the worker's
lines carry no prefix); pure reading, and one `why` run as a user runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cli import run_cli, run_cli_here
from tests.support.jobs import run_torchrun
from tests.support.line_findings import line_findings

from rankscope.evidence import decide
from rankscope.logs.cuda import ASYNC_STEP

TERMINATE = """\
{p}terminate called after throwing an instance of '{kind}'
{p}  what():  {what}
{p}Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):
{p}frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in /opt/torch/lib/libc10.so)
"""
ABORTED = (
    "E1204 10:12:13.401000 4411 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
    "local_rank: {rank} (pid: 4423) of binary: /usr/bin/python\n"
)
IMA = "CUDA error: an illegal memory access was encountered"


def _terminate(what: str, kind: str = "c10::Error", prefix: str = "") -> str:
    return TERMINATE.format(p=prefix, kind=kind, what=what)


def test_the_exception_is_the_reason_of_the_abort_and_the_aborted_rank_s() -> None:
    verdict = decide(line_findings("step 10\n" + _terminate(IMA) + ABORTED.format(rank=2)))
    assert verdict is not None
    assert (verdict.cause, verdict.who, verdict.next_step) == ("cpp_exception", "2", ASYNC_STEP)
    assert verdict.what.startswith(f"c10::Error: {IMA}")


def test_two_aborted_ranks_leave_it_without_one() -> None:
    text = _terminate(IMA) + ABORTED.format(rank=2) + ABORTED.format(rank=3)
    verdict = decide(line_findings(text))
    assert verdict is not None and (verdict.cause, verdict.who) == ("cpp_exception", None)


def test_a_prefixed_exception_names_its_rank_and_a_plain_one_its_own_step() -> None:
    text = _terminate("std::bad_function_call", kind="c10::Error", prefix="[default5]:")
    verdict = decide(line_findings(text))
    assert verdict is not None
    assert (verdict.cause, verdict.who) == ("cpp_exception", "5")
    assert "Exception raised from" in verdict.next_step


def test_the_watchdog_s_abort_after_a_timeout_is_a_victim() -> None:
    what = (
        "[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: "
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for x"
    )
    (found,) = [
        f for f in line_findings(_terminate(what, "c10::DistBackendError")) if f.cause == "cpp_exception"
    ]
    assert (found.role, found.who) == ("victim", "1")


def test_why_says_the_rank_aborted_on_it(tmp_path: Path) -> None:
    """torchrun's line names a local rank: `why` says so."""
    log = tmp_path / "job.log"
    log.write_text("step 10\n" + _terminate(IMA) + ABORTED.format(rank=2))
    verdict = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert verdict["text"] == f"local rank 2 aborted on an uncaught C++ exception: c10::Error: {IMA}"


def test_a_paste_cut_before_what_leaves_the_launcher_s_report() -> None:
    text = "step 10\nterminate called after throwing an instance of 'c10::Error'\n" + ABORTED.format(rank=2)
    verdict = decide(line_findings(text))
    assert verdict is not None and (verdict.cause, verdict.who) == ("sigabrt", "2")


def test_an_exception_type_without_error_in_its_name_is_read_beside_the_launcher_s_report() -> None:
    """std::bad_alloc's lines hold no "Error": they are looked for where a launcher reports the crash."""
    text = "step 10\n" + _terminate("std::bad_alloc", kind="std::bad_alloc") + ABORTED.format(rank=1)
    verdict = decide(line_findings(text))
    assert verdict is not None
    assert (verdict.cause, verdict.who, verdict.what) == (
        "cpp_exception",
        "1",
        "std::bad_alloc: std::bad_alloc (a C++ exception that nothing caught: the process aborted)",
    )
    assert "host memory" in verdict.next_step


def test_without_a_crash_report_an_exception_type_without_error_is_not_looked_for() -> None:
    """No launcher line: the block is not searched (nothing says a process died of it)."""
    text = "step 10\n" + _terminate("std::out_of_range", kind="std::out_of_range")
    assert [f for f in line_findings(text) if f.cause == "cpp_exception"] == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_native_assert_names_the_rank_and_the_c_file(tmp_path: Path) -> None:
    """A real torchrun --tee job whose rank 1 fails a C assert(): the culprit is its glibc line, with
    the C file and function, not only torchrun's SIGABRT; the --tee prefix names the local rank."""
    log = tmp_path / "job.log"
    job = Path(__file__).parent / "jobs" / "native_assert_job.py"
    assert run_torchrun(tmp_path, log, script=job, timeout=240, nproc=2, torchrun_args=["--tee", "3"]) != 0
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["where"], verdict["local"]) == (
        "native_assert",
        "1",
        "src/net_plugin.c:812",
        True,
    ), verdict
    assert "`r->used` in progress_loop" in verdict["what"], verdict

"""A rank killed by a signal of its own crash (SIGSEGV, SIGABRT, SIGBUS, SIGILL) comes with what to do
next; SIGKILL keeps its own, and an abort after torch's watchdog is its victim, with none. Logs
written here in the launchers' formats; one run of the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.line_findings import line_findings

from rankscope.evidence import decide
from rankscope.logs.line_evidence import CRASH_STEPS, KILLED_STEP

TORCHRUN = (
    "E1203 04:11:20.101000 140213 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: -{number}) local_rank: 1 (pid: 5123) of binary: /usr/bin/python3\n"
)
WATCHDOG = (
    "[rank0]:[E1203 04:01:19.5 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for "
    "600094 milliseconds before timing out.\n"
)


def _verdict(text: str) -> tuple[str, str, str]:
    verdict = decide(line_findings(text))
    assert verdict is not None
    return verdict.cause, verdict.role, verdict.next_step


@pytest.mark.parametrize(("number", "cause"), [(11, "sigsegv"), (6, "sigabrt"), (7, "sigbus"), (4, "sigill")])
def test_a_crash_signal_says_what_to_do_next(number: int, cause: str) -> None:
    assert _verdict(TORCHRUN.format(number=number)) == (cause, "culprit", CRASH_STEPS[cause])


def test_sigkill_keeps_its_own_step_and_a_bus_error_points_at_shared_memory() -> None:
    assert _verdict(TORCHRUN.format(number=9))[2] == KILLED_STEP
    assert "/dev/shm" in CRASH_STEPS["sigbus"]


def test_an_abort_after_the_watchdog_is_its_victim_with_no_step_of_its_own() -> None:
    cause, role, _ = _verdict(WATCHDOG + TORCHRUN.format(number=6))
    assert (cause, role) == ("watchdog_timeout", "culprit")
    (abort,) = [f for f in line_findings(WATCHDOG + TORCHRUN.format(number=6)) if f.cause == "sigabrt"]
    assert (abort.role, abort.next_step) == ("victim", "")


def test_a_shell_s_segmentation_fault_in_the_json_document(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "step 41\n./launch.sh: line 31: 91822 Segmentation fault      (core dumped) python train.py\n"
    )
    result = run_cli("logs", "errors", str(log), "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert (verdict["cause"], verdict["next_step"]) == ("sigsegv", CRASH_STEPS["sigsegv"])

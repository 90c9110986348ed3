"""`logs errors` reads faulthandler's dump (``Fatal Python error: Segmentation fault`` and the
threads' stacks) as the native crash of the one rank its launcher reports dead of that signal:
the place is the crashed thread's innermost user frame, and the next step no longer asks for
PYTHONFAULTHANDLER. Logs written here in the form faulthandler and torchrun print; through the
command line, and `why` on the same file cites the dump once."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli, run_cli_here

DUMP = """\
{p}Fatal Python error: Segmentation fault
{p}
{p}Thread 0x00007f3b1e7fc640 (most recent call first):
{p}  File "/usr/lib/python3.11/threading.py", line 324 in wait
{p}
{p}Current thread 0x00007f3b3c2a8740 (most recent call first):
{p}  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1736 in _call_impl
{p}  File "/job/ops.py", line 12 in fused_gelu
{p}  File "/job/train.py", line 90 in step
{p}
{p}Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)
"""
DIED = (
    "E1204 10:12:13.401000 4411 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -{n}) "
    "local_rank: {rank} (pid: 4423) of binary: /usr/bin/python\n"
)


def test_the_dump_places_the_rank_s_crash(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[default1]:step 7\n" + DUMP.format(p="[default1]:") + DIED.format(n=11, rank=1))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["where"], verdict["line"]) == (
        "sigsegv",
        "1",
        "fused_gelu (ops.py:12)",
        2,
    )
    assert "PYTHONFAULTHANDLER" not in verdict["next_step"]
    assert "fused_gelu (ops.py:12)" in verdict["next_step"]
    why = run_cli_here("why", "--log", str(log), "--json").json()["verdict"]
    assert why["location"] == "fused_gelu (ops.py:12)"
    cited = [e["text"] for e in why["evidence"] if "faulthandler" in e["text"]]
    assert cited == ["its faulthandler dump: Fatal Python error: Segmentation fault"]


SUMMARY = """\
Root Cause (first observed failure):
[0]:
  time      : 2024-12-04_10:12:13
  host      : node-8
  rank      : 11 (local_rank: 3)
  exitcode  : -11 (pid: 4423)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 4423
"""


def test_a_dump_under_torchrun_s_prefix_is_a_local_rank_whose_summary_names_the_global_one(
    tmp_path: Path,
) -> None:
    """torchrun --tee's "[default3]:" names the local rank; the node's failure summary says that process
    is rank 11. The verdict must not call it global rank 3."""
    log = tmp_path / "job.log"
    log.write_text(DUMP.format(p="[default3]:") + DIED.format(n=11, rank=3) + SUMMARY)
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["global_rank"], verdict["local"]) == (
        "sigsegv",
        "3",
        11,
        True,
    )
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith("root cause: local rank 3 (global rank 11): its faulthandler dump"), first


def test_a_dump_no_death_matches_names_no_rank(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(DUMP.format(p="") + DIED.format(n=11, rank=1) + DIED.format(n=11, rank=3))
    verdict = run_cli("logs", "errors", str(log), "--json").json()["verdict"]
    assert verdict["cause"] == "sigsegv" and verdict["where"] is None  # two ranks died of it: whose dump?


def test_a_rank_s_own_file_names_its_dump_without_a_launcher(tmp_path: Path) -> None:
    """torchrun --log-dir: each rank's stderr.log; a dump at the end of rank 1's is rank 1's."""
    attempt = tmp_path / "none_x" / "attempt_0"
    for rank in (0, 1):
        (attempt / str(rank)).mkdir(parents=True)
        (attempt / str(rank) / "stdout.log").write_text("")
    (attempt / "0" / "stderr.log").write_text("step 7\n")
    (attempt / "1" / "stderr.log").write_text("step 7\n" + DUMP.format(p=""))
    verdict = run_cli("logs", "errors", str(tmp_path), "--json").json()["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["where"], verdict["line"]) == (
        "sigsegv",
        "1",
        "fused_gelu (ops.py:12)",
        2,
    )


def test_a_dump_megabytes_before_its_launcher_s_report_is_paired_with_it(tmp_path: Path) -> None:
    """The report comes blocks after the dump (a log that goes on after the crash): still that
    rank's dump. torchrun's line names a local rank, and the root cause says so."""
    log = tmp_path / "job.log"
    noise = "".join(
        f"W1204 10:11:{i % 60:02d}.000000 4411 torch/utils/data/loader.py:12] a warning of another kind {i}\n"
        for i in range(40_000)
    )
    log.write_text("step 7\n" + DUMP.format(p="") + noise + DIED.format(n=11, rank=1))
    assert log.stat().st_size > 3 << 20
    result = run_cli("logs", "errors", str(log), "--json").json()
    verdict = result["verdict"]
    assert (verdict["cause"], verdict["who"], verdict["global_rank"], verdict["where"], verdict["line"]) == (
        "sigsegv",
        "1",
        None,
        "fused_gelu (ops.py:12)",
        2,
    )
    first = run_cli("logs", "errors", str(log)).stdout.splitlines()[0]
    assert first.startswith("root cause: local rank 1: its faulthandler dump: Fatal Python error:"), first


WATCHDOG_ABORT = """\
[rank0]:[E412 21:44:52.118204113 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.22.3
[rank0]:ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
[rank0]:Last error:
[rank0]:socketProgress: Connection closed by remote peer node-b<46531>
[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'
[rank0]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.22.3
[rank0]:Fatal Python error: Aborted
[rank0]:
[rank0]:Thread 0x00007f7711fff6c0 (most recent call first):
[rank0]:  File "/opt/venv/lib/python3.12/site-packages/torch/distributed/fsdp/_flat_param.py", line 1426, in _all_gather_flat_param
[rank0]:  File "/srv/tune/train.py", line 241, in main
E0412 21:44:55.610000 4390 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 0 (pid: 4411) of binary: /opt/venv/bin/python3
"""


def test_the_dump_of_torch_s_abort_after_an_nccl_error_is_a_victim(tmp_path: Path) -> None:
    """faulthandler's dump of the abort torch's watchdog made after its peer left (a public thread's
    shape): a victim like the launcher's SIGABRT, so no culprit is named (it named rank 0)."""
    log = tmp_path / "node-a.log"
    log.write_text(WATCHDOG_ABORT)
    data = run_cli("logs", "errors", str(log), "--json").json()
    dumps = [f for f in data["findings"] if f["kind"] == "native_crash"]
    assert [f["role"] for f in dumps] == ["victim"], dumps
    assert data["verdict"] is None, data["verdict"]

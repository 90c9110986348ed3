"""The weighing (pure): synthetic signals, and the recorded H100 data for a rank blocked on its GPU.

This machine has no GPU: the GPU case reads recordings made on an H100 node (tests/data/gpu-h100/:
py-spy --native of a 4-rank job whose rank 2 waits in cudaDeviceSynchronize behind a kernel that
never ends, nvidia-smi's CSV query and its -q -x XML). Nothing else is mocked but nvidia-smi itself
where `why` runs it (a stand-in that prints the recording).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.stacks.pyspy_text import snapshots

from rankscope.evidence import CULPRIT, VICTIM, Finding, Kind
from rankscope.model import Frame, Member, RankId
from rankscope.nvidia.nvsmi import parse_query_xml
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.gpu import gpu_statuses
from rankscope.stacks.merge import group_snapshots
from rankscope.stacks.report import ProcessInfo, StackGroup, StacksReport
from rankscope.why.gpu import from_status, with_details
from rankscope.why.render import render_text
from rankscope.why.report import CAUSE, NO_PROBLEM, NOTHING, READ, DeadRank, KernelEvent, RankFile
from rankscope.why.secrets import without_secrets
from rankscope.why.signals import Gathered
from rankscope.why.weigh import weigh

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu-h100"


def _stacks(groups: dict[tuple[int, ...], list[Frame]], world: int, host: str = "n1") -> StacksReport:
    report = StacksReport(hosts=[host])
    for ranks, frames in groups.items():
        members = [Member(host, 100 + r, r) for r in ranks]
        report.groups.append(StackGroup("MainThread", True, tuple(frames), members))
        for r in ranks:
            report.processes.append(ProcessInfo(100 + r, RankId(host, r, r, world)))
    report.diagnosis = diagnose(report)
    return report


MAIN = Frame("<module>", "/job/train.py", 40)
BARRIER = [
    MAIN,
    Frame("wait_for_peers", "/job/train.py", 12),
    Frame("barrier", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 5356),
]
LOADER = [MAIN, Frame("load_batch", "/job/data.py", 7)]


def test_a_rank_blocked_on_its_gpu_from_the_recorded_h100_job() -> None:
    snaps = snapshots((DATA / "pyspy_native_cuda_hang.txt").read_text(), "gpu0")
    report = StacksReport(hosts=["gpu0"], groups=group_snapshots(snaps), native=True)
    report.processes = [ProcessInfo(s.pid, s.rank, native=True) for s in snaps]
    report.gpus = gpu_statuses(parse_query_xml((DATA / "nvidia-smi-q.xml").read_text()), "gpu0")
    report.diagnosis = diagnose(report)
    gpus = with_details(
        from_status(report.gpus), parse_query_xml((DATA / "nvidia-smi-q.xml").read_text()), "gpu0"
    )
    why = weigh(Gathered(hosts=["gpu0"], stacks=report, gpus=gpus))
    assert why.outcome == CAUSE
    verdict = why.verdict
    assert verdict is not None
    assert (verdict.cause, verdict.ranks) == ("gpu_wait", [2])
    assert verdict.location == "stuck_kernel (gpu_hang.py:14)"
    sources = [e.source for e in verdict.evidence]
    assert sources[0] == "stacks"
    assert "cudaDeviceSynchronize" in verdict.evidence[0].text
    assert any("ranks 0-1,3 wait in all_reduce" in e.text for e in verdict.evidence)
    gpu_line = next(e for e in verdict.evidence if e.source == "nvidia-smi on gpu0")
    assert "GPU 0 (NVIDIA H100 80GB HBM3)" in gpu_line.text and "utilization 0%: nearly idle" in gpu_line.text
    assert gpus[0].ecc_uncorrected == 0


def test_a_traceback_outweighs_what_the_stacks_show_and_victims_are_never_the_verdict() -> None:
    stacks = _stacks({(0,): BARRIER, (1,): LOADER}, world=2)
    log = [
        Finding(Kind.TRACEBACK, "python_exception", VICTIM, "0", "RuntimeError: Connection closed by peer", "/job/train.py:12", "job.log", 9, 9, 0),
        Finding(Kind.TRACEBACK, "python_exception", CULPRIT, "1", "ValueError: bad shard", "/job/data.py:7", "job.log", 3, 3, 1, exception="ValueError"),
    ]  # fmt: skip
    why = weigh(
        Gathered(
            hosts=["n1"],
            stacks=stacks,
            log_findings=log,
            log_places={("job.log", 3): "load_batch (data.py:7)"},
        )
    )
    assert why.verdict is not None
    assert (why.verdict.cause, why.verdict.ranks, why.verdict.location) == (
        "python_exception",
        [1],
        "load_batch (data.py:7)",
    )
    assert why.verdict.evidence[0].source == "job.log:3"
    # the live stacks that agree are evidence of the verdict, not another hypothesis
    assert any(e.source == "stacks" and "rank 1 is elsewhere" in e.text for e in why.verdict.evidence)
    assert why.hypotheses == []
    assert [(s.ranks, s.state) for s in why.ranks] == [
        ("0", "waits in barrier (torch.distributed) called from wait_for_peers (train.py:12)"),
        ("1", "is in load_batch (data.py:7)"),
    ]


def test_an_ended_rank_its_crash_dump_and_ranks_merged_by_state() -> None:
    stacks = _stacks({(0, 2, 3): BARRIER}, world=4)
    gathered = Gathered(
        hosts=["n1"],
        stacks=stacks,
        dead=[DeadRank(777, 1, 9, None, "n1")],
        pid_rank={777: 1},
        rank_files=[
            RankFile("term", "/rt/n1.rank-0.pid-100.term", 0, 100, "wait_for_peers (train.py:12)", "SIGTERM")
        ],
    )
    why = weigh(gathered)
    assert why.verdict is not None
    assert (why.verdict.cause, why.verdict.ranks) == ("sigkill", [1])
    assert why.verdict.evidence[0].source == "exit status (/proc/777/stat)"
    assert "SIGKILL" in why.verdict.next_step
    assert [(s.ranks, s.state.split(" (")[0]) for s in why.ranks] == [
        ("0,2-3", "waits in barrier"),
        ("1", "ended: killed by SIGKILL"),
    ]
    text = render_text(why)
    assert text.index("Verdict: rank 1 was killed by SIGKILL") < text.index("Ranks")


def test_every_rank_in_one_collective_is_a_cause_without_a_culprit() -> None:
    why = weigh(Gathered(hosts=["n1"], stacks=_stacks({(0, 1): BARRIER}, world=2)))
    assert why.verdict is not None
    assert (why.verdict.cause, why.verdict.ranks) == ("all_waiting", [])


def test_nothing_wrong_and_nothing_read() -> None:
    gathered = Gathered(hosts=["n1"], stacks=_stacks({(0, 1): LOADER}, world=2))
    gathered.signal("stacks", READ, "2 of 2")
    assert weigh(gathered).outcome == NO_PROBLEM
    assert weigh(Gathered()).outcome == NOTHING


def test_secret_looking_variables_are_removed() -> None:
    env = {
        "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "WANDB_API_KEY": "w", "DB": "postgres://u:pw@db/x",
        "MASTER_ADDR": "10.0.0.1", "RANK": "0", "PATH": "/usr/bin", "NCCL_DEBUG": "INFO",
    }  # fmt: skip
    kept, removed = without_secrets(env)
    assert removed == ["AWS_SECRET_ACCESS_KEY", "DB", "HF_TOKEN", "WANDB_API_KEY"]
    assert set(kept) == {"MASTER_ADDR", "RANK", "PATH", "NCCL_DEBUG"}


def test_a_rank_behind_the_others_is_a_straggler() -> None:
    from rankscope.stacks.report import StepInfo

    stacks = _stacks({(0, 1, 2): BARRIER}, world=3)
    for process, step in zip(stacks.processes, (7, 6, 7)):
        process.progress = StepInfo(step=step)
    stacks.diagnosis = diagnose(stacks)
    why = weigh(Gathered(hosts=["n1"], stacks=stacks))
    assert why.verdict is not None
    assert (why.verdict.cause, why.verdict.ranks) == ("straggler", [1])
    assert why.verdict.evidence[0].source == "progress markers"
    assert "rank 1 at step 6 while other ranks reached step 7" in why.verdict.evidence[0].text


def _ecc_xml() -> str:
    """The recorded H100's `nvidia-smi -q -x`, edited as a GPU with 2 uncorrected ECC errors since the
    driver loaded and one process (pid 4243) would show it (NVIDIA's format, numbers written here)."""
    xml = (DATA / "nvidia-smi-q.xml").read_text()
    volatile = xml.index("<volatile>")
    xml = xml[:volatile] + xml[volatile:].replace(
        "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1
    )
    return xml.replace(
        "<processes>\n",
        "<processes>\n<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>"
        "<pid>4243</pid><type>C</type><process_name>python3</process_name><used_memory>1234 MiB</used_memory></process_info>\n",
    )


def test_uncorrected_ecc_errors_on_the_gpu_of_a_rank() -> None:
    xml = _ecc_xml()
    gpus = with_details([], parse_query_xml(xml), "gpu0")
    assert (gpus[0].ecc_uncorrected, gpus[0].pids) == (2, [4243])
    why = weigh(Gathered(hosts=["gpu0"], gpus=gpus, pid_rank={4243: 5, 4244: 6}))
    assert why.verdict is not None
    assert (why.verdict.cause, why.verdict.ranks) == ("gpu_ecc", [5])
    assert (
        "GPU 0 on gpu0 has 2 uncorrected ECC errors since the driver loaded; rank 5 runs on it"
        in why.verdict.evidence[0].text
    )
    assert why.verdict.evidence[0].source == "nvidia-smi on gpu0"


def test_why_asks_the_one_gpu_reader_for_ecc_errors_and_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu_details goes through rankscope.nvidia.read (NVML, else `nvidia-smi -q -x`). No GPU and no
    driver here (NVML does not start): a stand-in nvidia-smi, the one thing mocked, prints the edited
    H100 recording for exactly ``-q -x`` and fails for any other command line."""
    from rankscope.why.collect import gpu_details

    xml = tmp_path / "q.xml"
    xml.write_text(_ecc_xml())
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] || exit 9\nexec cat {xml}\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    status = from_status(gpu_statuses(parse_query_xml(xml.read_text()), "gpu0"))
    assert (status[0].ecc_uncorrected, status[0].pids) == (None, [])
    (gpu,) = gpu_details(status, "gpu0", time.monotonic() + 10)
    assert (gpu.ecc_uncorrected, gpu.pids) == (2, [4243])
    assert (gpu.name, gpu.utilization) == (status[0].name, status[0].utilization)  # the query's, kept
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert gpu_details(status, "gpu0", time.monotonic() + 10) == status  # as they were


ALL_REDUCE = [
    MAIN,
    Frame("sync_gradients", "/job/train.py", 20),
    Frame("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3252),
]


@pytest.mark.parametrize(
    ("groups", "world", "blamed"),
    [
        ({(0,): ALL_REDUCE, (1,): BARRIER}, 2, None),  # one against one: no side to blame
        ({(0, 2): ALL_REDUCE, (1, 3): BARRIER}, 4, None),  # two stages, as many ranks each
        ({(0, 1, 2): ALL_REDUCE, (3,): BARRIER}, 4, [3]),  # a majority: the odd rank out
    ],
)
def test_ranks_in_different_collectives_blame_a_side_only_where_a_majority_says_which(
    groups: dict[tuple[int, ...], list[Frame]], world: int, blamed: list[int] | None
) -> None:
    why = weigh(Gathered(hosts=["n1"], stacks=_stacks(groups, world=world)))
    verdict = why.verdict
    assert verdict is not None
    if blamed is None:
        assert (verdict.cause, verdict.ranks) == ("mismatch", [])
        assert verdict.text == (
            "the ranks wait in different collectives, as many in each: a mismatched collective call "
            "(no majority says which side is off)"
        ), verdict.text
        texts = [e.text for e in verdict.evidence]
        assert any(" in barrier (torch.distributed)" in t for t in texts), texts
        assert any(" in all_reduce (torch.distributed)" in t for t in texts), texts
    else:
        assert (verdict.cause, verdict.ranks) == ("other_collective", blamed)


def test_a_sigkill_the_kernel_says_was_its_oom_killer_is_said_so_without_a_hedge() -> None:
    """Exit status SIGKILL alone could be the OOM killer or the scheduler; dmesg's OOM line for the same
    pid settles it: one verdict, the kernel's words beside the exit status."""
    oom = "Out of memory: Killed process 777 (python3) total-vm:48102944kB, anon-rss:46236812kB"
    gathered = Gathered(
        hosts=["n1"],
        stacks=_stacks({(0, 2, 3): BARRIER}, world=4),
        dead=[DeadRank(777, 1, 9, None, "n1")],
        pid_rank={777: 1},
        kernel=[KernelEvent("oom_kill", oom, 777, "2026-11-27T06:30:00", line=3)],
    )
    why = weigh(gathered)
    verdict = why.verdict
    assert verdict is not None
    assert (verdict.cause, verdict.ranks) == ("oom_kill", [1])
    assert verdict.text == "rank 1 was killed by the kernel's OOM killer", verdict.text
    sources = [e.source for e in verdict.evidence]
    assert "kernel messages, line 3" in sources and "exit status (/proc/777/stat)" in sources, sources
    assert not any("or the scheduler" in e.text for e in verdict.evidence)
    assert not [h for h in why.hypotheses[1:] if h.cause == "sigkill"]


def test_live_stacks_that_single_out_another_rank_are_not_the_verdicts_evidence() -> None:
    """Rank 1's traceback is in the output, but the live stacks show rank 0 elsewhere while rank 1
    waits (a restarted job whose new attempt hangs, say): two stories, each with its own lines."""
    stacks = _stacks({(0,): LOADER, (1,): BARRIER}, world=2)
    log = [
        Finding(Kind.TRACEBACK, "python_exception", CULPRIT, "1", "ValueError: loss is NaN", "/job/train.py:4", "job.log", 5, 5, 1, exception="ValueError"),
    ]  # fmt: skip
    why = weigh(Gathered(hosts=["n1"], stacks=stacks, log_findings=log))
    assert why.verdict is not None and why.verdict.ranks == [1]
    assert not any("rank 0 is elsewhere" in e.text for e in why.verdict.evidence), why.verdict.evidence
    elsewhere = [h for h in why.hypotheses if h.cause == "elsewhere"]
    assert elsewhere and elsewhere[0].ranks == [0]


def test_no_rank_is_missing_among_the_others_when_no_rank_was_dumped() -> None:
    """Between two attempts of an elastic job every worker can end before its dump: the world size
    still says 2, but no rank is "not found while the others are there"."""
    report = StacksReport(hosts=["n1"])
    report.processes = [ProcessInfo(100 + r, RankId("n1", r, r, 2), dumped=False) for r in (0, 1)]
    report.diagnosis = diagnose(report)
    why = weigh(Gathered(hosts=["n1"], stacks=report))
    assert not [h for h in [why.verdict, *why.hypotheses] if h is not None and h.cause == "rank_missing"]

"""`stacks --native`: native frames that say why a rank waits, a rank waiting for its GPU, and
native dumps of representatives only (every rank with --native-all).

The GPU cases read recordings (tests/data/gpu-h100/README.md): this machine has no GPU, so what
py-spy and nvidia-smi printed on an H100 node stands in for running them here. The cases on a real
hung torchrun job (gloo) under real py-spy --native are in tests/stacks/test_real_jobs.py, beside the
other tests of the job they read.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from tests.stacks.pyspy_text import snapshots

from rankscope.nvidia.nvsmi import parse_query_xml
from rankscope.stacks.analyse import diagnose
from rankscope.stacks.frames import explaining_frames, gpu_wait, short_native_name
from rankscope.stacks.gpu import gpu_statuses, query_gpus
from rankscope.stacks.merge import group_snapshots, merge_reports, representatives
from rankscope.stacks.render import render_text
from rankscope.stacks.report import GpuStatus, ProcessInfo, StacksReport, load_report, report_document

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu-h100"
PYBIND_FUN = next(
    line.strip().rsplit(" (", 1)[0]
    for line in (DATA / "pyspy_native_cuda_hang.txt").read_text().splitlines()
    if "::_FUN" in line
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("c10d::Work::wait", "c10d::Work::wait"),
        ("pthread_cond_wait", "pthread_cond_wait"),
        ("std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<…>::push_back"),
        ("gloo::transport::tcp::UnboundBuffer::waitRecv", "gloo::…::UnboundBuffer::waitRecv"),
        (PYBIND_FUN, "pybind11::…::{lambda}::_FUN"),
    ],
)
def test_cpp_names_are_shortened(name: str, short: str) -> None:
    assert short_native_name(name) == short


def _recorded_report(gpus: list[GpuStatus] | None = None) -> StacksReport:
    """The recorded py-spy --native dump of a 4-rank job whose rank 2 waits behind a kernel that never ends."""
    snaps = snapshots((DATA / "pyspy_native_cuda_hang.txt").read_text(), host="gpu0")
    report = StacksReport(groups=group_snapshots(snaps), hosts=["gpu0"], native=True, gpus=gpus)
    report.processes = [ProcessInfo(s.pid, s.rank, s.cmdline, native=True) for s in snaps]
    report.diagnosis = diagnose(report)
    return report


def test_recorded_gpu_wait_is_named_in_the_diagnosis() -> None:
    report = _recorded_report()
    assert report.diagnosis is not None
    (gpu,) = [f for f in report.diagnosis.findings if f.gpu_wait]
    assert gpu.ranks == "2" and gpu.gpu_wait == "cudaDeviceSynchronize"
    assert (
        gpu.text
        == "rank 2 waits for the GPU (cudaDeviceSynchronize) called from stuck_kernel (gpu_hang.py:14)"
    )
    (waiting,) = [f for f in report.diagnosis.findings if f.kind == "waiting"]
    assert waiting.ranks == "0-1,3"
    assert waiting.text == (
        "ranks 0-1,3 wait in all_reduce (torch.distributed) called from sync_grads (gpu_hang.py:17), "
        "blocked in c10d::Work::wait"
    )
    assert report.diagnosis.divergent_ranks == [2]


def test_recorded_native_text_keeps_the_wait_frames_and_drops_the_noise() -> None:
    report = _recorded_report()
    assert report.diagnosis is not None
    text = render_text(report, report.diagnosis)
    assert "??" not in text and "0x7f" not in text
    for kept in (
        "c10d::Work::wait (libtorch_cpu.so)",
        "pthread_cond_wait (libc.so.6)",
        "cudaDeviceSynchronize (libcudart.so.13)",
        "cuCtxSynchronize_v2 (libcuda.so.580.159.04)",
        "pybind11::…::{lambda}::_FUN (libtorch_python.so)",
    ):
        assert kept in text, text
    assert "std::chrono" not in text  # template noise shortened
    full = render_text(report, report.diagnosis, full=True)
    assert "?? (libc.so.6)" in full and "std::chrono::duration" in full  # --full shows every frame as it was


def test_explaining_frames_are_the_work_the_gpu_and_the_primitive() -> None:
    (gpu_rank,) = [
        s for s in snapshots((DATA / "pyspy_native_cuda_hang.txt").read_text(), "gpu0") if s.rank.rank == 2
    ]
    main = gpu_rank.main_thread
    assert main is not None
    kept = sorted(main.frames[i].function for i in explaining_frames(main.frames))
    assert kept == ["cuCtxSynchronize_v2", "cudaDeviceSynchronize"]
    assert gpu_wait(main.frames) == "cudaDeviceSynchronize"
    # Without native frames the Python frame of torch.cuda.synchronize still says it.
    python_only = tuple(f for f in main.frames if not f.is_native)
    assert gpu_wait(python_only) == "torch.cuda.synchronize"


def _fake_nvidia_smi(tmp_path: Path, csv: str) -> Path:
    """An `nvidia-smi` on PATH that prints a recorded answer and keeps its arguments (no GPU here)."""
    (tmp_path / "answer.csv").write_text(csv)
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\ncat {tmp_path}/answer.csv\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return tmp_path / "argv"


def test_gpu_status_from_recorded_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A recording: no GPU exists on this machine; query.csv is what nvidia-smi printed on the H100 node.
    # The XML is what `nvidia-smi -q -x` printed there: the one GPU reader doctor uses too.
    argv = _fake_nvidia_smi(tmp_path, (DATA / "nvidia-smi-q.xml").read_text())
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    gpus = query_gpus("gpu0")
    assert argv.read_text().split() == ["-q", "-x"]
    assert gpus == [GpuStatus("gpu0", 0, "NVIDIA H100 80GB HBM3", 0, 0, 81559, "nvidia-smi")]
    report = _recorded_report(gpus)
    assert report.diagnosis is not None
    assert report.diagnosis.notes == [
        "rank 2 waits for GPU 0 (NVIDIA H100 80GB HBM3): 0% busy, 0 of 81559 MiB used (nvidia-smi); "
        "no kernel ran in the last sample period: the GPU itself is idle"
    ]


def test_a_kernel_that_never_ends_shows_a_busy_gpu() -> None:
    # The recorded document with the values of a GPU running a kernel (as nvidia-smi prints them).
    xml = (DATA / "nvidia-smi-q.xml").read_text()
    busy = xml.replace("<gpu_util>0 %</gpu_util>", "<gpu_util>100 %</gpu_util>", 1)
    busy = busy.replace("<used>0 MiB</used>", "<used>1025 MiB</used>", 1)
    assert busy.count("100 %") > xml.count("100 %") and "1025 MiB" in busy
    gpus = gpu_statuses(parse_query_xml(busy), "gpu0")
    report = _recorded_report(gpus)
    assert report.diagnosis is not None
    (note,) = report.diagnosis.notes
    assert note.startswith(
        "rank 2 waits for GPU 0 (NVIDIA H100 80GB HBM3): 100% busy, 1025 of 81559 MiB used"
    )
    assert "one that never ends keeps its GPU at 100%" in note


def test_representatives_are_the_first_two_of_each_python_stack() -> None:
    snaps = snapshots((DATA / "pyspy_native_cuda_hang.txt").read_text(), host="gpu0")
    pids = {s.rank.rank: s.pid for s in snaps}
    assert sorted(representatives(snaps)) == [pids[0], pids[1], pids[2]]
    assert sorted(representatives(snaps, per_group=1)) == [pids[0], pids[2]]


def test_no_gpu_no_gpu_note() -> None:
    report = _recorded_report(gpus=None)
    assert report.diagnosis is not None and report.diagnosis.notes == []
    assert "gpus" not in report_document(report)


def test_gpus_and_native_flags_survive_json_and_a_multi_node_merge() -> None:
    gpus = gpu_statuses(parse_query_xml((DATA / "nvidia-smi-q.xml").read_text()), "gpu0")
    node = load_report(json.loads(json.dumps(report_document(_recorded_report(gpus)))))
    other = StacksReport(
        hosts=["gpu1"], gpus=[GpuStatus("gpu1", 0, "NVIDIA H100 80GB HBM3", 100, 1025, 81559)]
    )
    merged = merge_reports([node, other])
    assert merged.gpus == [*gpus, *(other.gpus or [])]
    assert all(p.native for p in merged.processes)
    merged.diagnosis = diagnose(merged)
    (note,) = merged.diagnosis.notes  # rank 2 runs on gpu0: gpu1's GPU is not its own
    assert note.startswith("rank 2 waits for GPU 0 (NVIDIA H100 80GB HBM3): 0% busy")

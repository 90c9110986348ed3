"""`--nproc` derives each rank's command line from the same options object; it reads back to the same options."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rankscope.cli.bench import allreduce
from rankscope.cli.gputest import gpu_test
from rankscope.cli.params import from_params
from rankscope.gputest.allreduce import BenchOptions
from rankscope.gputest.rank import GpuTestOptions


def test_gpu_test_rank_argv_reads_back() -> None:
    options = GpuTestOptions(
        backend="gloo", timeout=7.25, nproc=4, devices="0,1,2,3", isolate=True, json=True
    )
    argv = options.rank_argv()
    assert argv[0] == "gpu-test"
    with gpu_test.make_context("gpu-test", argv[1:]) as ctx:
        again = from_params(GpuTestOptions, ctx.params)
    # the launching options stay with the launcher
    assert again == replace(options, nproc=None, devices=None, isolate=False, json=False)


def test_bench_rank_argv_reads_back(tmp_path: Path) -> None:
    options = BenchOptions(
        backend="gloo", nproc=2, min_bytes="2K", max_bytes="1M", factor=8, warmup=2, iters=9, timeout=33.5,
        json=True, plot=str(tmp_path / "p.png"),
    )  # fmt: skip
    argv = options.rank_argv()
    assert argv[:2] == ["bench", "allreduce"]
    with allreduce.make_context("allreduce", argv[2:]) as ctx:
        again = from_params(BenchOptions, ctx.params)
    assert again == replace(options, nproc=None)


def test_default_options_write_no_flag_and_read_back() -> None:
    # Flags are derived from the fields (rankscope.cmdline): a default is not written, so the
    # rank's own defaults must be the same.
    assert GpuTestOptions().rank_argv() == ["gpu-test"]
    with gpu_test.make_context("gpu-test", []) as ctx:
        assert from_params(GpuTestOptions, ctx.params) == GpuTestOptions()
    assert BenchOptions().rank_argv() == ["bench", "allreduce"]
    with allreduce.make_context("allreduce", []) as ctx:
        assert from_params(BenchOptions, ctx.params) == BenchOptions()

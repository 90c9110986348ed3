"""`rankscope bench allreduce`: all_reduce bandwidth (algbw, busbw) over a sweep of payload sizes."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from typing import Any

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode, RankscopeError

ALLREDUCE_HELP = """Measure all_reduce bandwidth the way nccl-tests does: algbw = bytes / time and
busbw = algbw * 2(n-1)/n, over payload sizes from --min-bytes to --max-bytes (times --factor),
after warm-up iterations. The last line names the slow rank (the one the others keep waiting for:
`slowest: rank n2:1 — the others wait for it: 25.0x its own time ...`), or says none stands out.
gloo on CPU, nccl on GPU. Run it under your launcher, or with --nproc on this node.

\b
Examples:
  rankscope bench allreduce --nproc 2                  # this node, torchrun started for you
  rankscope bench allreduce --nproc 4 --max-bytes 64M --plot busbw.png
  torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint n1:29500 -m rankscope bench allreduce --max-bytes 1G
  rankscope bench allreduce --nproc 2 --json
"""


BENCH_HELP = """Benchmarks of the job's communication.

\b
Examples:
  rankscope bench allreduce --nproc 2
  rankscope bench allreduce --nproc 4 --max-bytes 64M --plot busbw.png
"""


@click.group(help=BENCH_HELP)
def bench() -> None:
    pass


@bench.command("allreduce", help=ALLREDUCE_HELP)
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    default=None,
    help="Backend [default: nccl where CUDA is available, else gloo].",
)
@click.option(
    "--nproc",
    type=click.IntRange(2, 256),
    metavar="N",
    default=None,
    help="Start this many ranks here with torchrun.",
)
@click.option(
    "--min-bytes",
    metavar="SIZE",
    default="1K",
    show_default=True,
    help="Smallest payload (K, M, G suffixes).",
)
@click.option("--max-bytes", metavar="SIZE", default="16M", show_default=True, help="Largest payload.")
@click.option(
    "--factor",
    type=click.IntRange(2, 1024),
    metavar="N",
    default=4,
    show_default=True,
    help="Size multiplier.",
)
@click.option("--warmup", type=click.IntRange(0, 10_000), metavar="N", default=5, show_default=True)
@click.option("--iters", type=click.IntRange(1, 100_000), metavar="N", default=20, show_default=True)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    metavar="SECONDS",
    default=120.0,
    show_default=True,
    help="Process-group timeout in seconds.",
)
@click.option("--json", "json", is_flag=True, help="Print a rankscope.bench.allreduce document.")
@click.option(
    "--plot",
    default=None,
    metavar="PNG",
    help="Write busbw against size as a PNG (needs matplotlib: exit 6 before the run without it).",
)
def allreduce(**params: Any) -> int:
    from rankscope.gputest.allreduce import BenchOptions
    from rankscope.gputest.bandwidth import parse_size, sweep

    options = from_params(BenchOptions, params)
    try:
        low, high = parse_size(options.min_bytes), parse_size(options.max_bytes)
    except ValueError:
        raise BadInputError("--min-bytes/--max-bytes must be sizes such as 1K, 16M or 1G") from None
    sizes = sweep(low, high, options.factor)
    if not sizes:
        raise BadInputError(f"no payload size between {options.min_bytes} and {options.max_bytes}")
    if options.plot:
        _matplotlib_installed()  # before any rank runs: a sweep is not lost to a missing plotter
    if options.nproc is not None:
        return _launch(options)
    return _in_rank(options, sizes)


def _launch(options: Any) -> int:
    from rankscope.gputest.launch import run_local
    from rankscope.gputest.rank import torch_installed

    torch_installed()
    run = run_local(options.nproc, options.rank_argv(), options.timeout)
    if run.timed_out:
        click.echo("bench allreduce: did not finish in time; the job was stopped", err=True)
        return int(ExitCode.RANKS_FAILED)
    return int(ExitCode.OK) if run.returncode == 0 else int(ExitCode.RANKS_FAILED)


def _in_rank(options: Any, sizes: list[int]) -> int:
    from rankscope.gputest.allreduce import run_bench
    from rankscope.gputest.bandwidth import table_lines
    from rankscope.serial import dump_document

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    result = run_bench(options.backend, sizes, options.warmup, options.iters, options.timeout)
    if result is None:
        return int(ExitCode.OK)  # rank 0 reports for everyone
    if options.json:
        click.echo(json.dumps(dump_document(result), indent=2))
    else:
        for line in table_lines(result):
            click.echo(line)
    if options.plot:
        _plot(result, options.plot)
        click.echo(f"bench allreduce: plot written to {options.plot}", err=True)
    return int(ExitCode.OK)


def _matplotlib_installed() -> None:
    """--plot's check (matplotlib is optional, not a dependency), without importing it."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except ImportError:
        found = False
    if not found:
        raise RankscopeError(
            "bench allreduce --plot needs matplotlib and it is not installed in this environment",
            "pip install matplotlib (or leave out --plot)",
            ExitCode.MISSING_TOOL,
        )


def _plot(result: Any, path: str) -> None:
    """busbw against payload size as a PNG (matplotlib was found before the run)."""
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    figure, axes = plt.subplots(figsize=(7, 4))
    sizes = [row.size for row in result.rows]
    axes.plot(sizes, [row.busbw for row in result.rows], marker="o", label="busbw")
    axes.plot(sizes, [row.algbw for row in result.rows], marker=".", linestyle="--", label="algbw")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("payload (bytes)")
    axes.set_ylabel("GB/s")
    axes.set_title(f"all_reduce, {result.world_size} ranks, {result.backend}")
    axes.legend()
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)

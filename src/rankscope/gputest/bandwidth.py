"""all_reduce bandwidth: nccl-tests' algbw/busbw from per-rank timings, and the rank the others wait for.

Pure: per-rank mean times in, rows and outliers out. algbw = bytes / time; busbw = algbw * 2(n-1)/n
(the bytes each rank really moves in a ring all_reduce, so numbers compare across world sizes).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rankscope.model import rank_label

#: A rank whose all_reduce takes less than this fraction of the others' median is the one they wait for.
WAITED_FOR_RATIO = 0.5


@dataclass
class RankTimes:
    host: str
    rank: int
    #: mean seconds of one all_reduce, one per payload size, in the order of the sweep
    seconds: list[float]


@dataclass
class Row:
    size: int
    elements: int
    time_us: float = field(metadata={"round": 1})
    algbw: float = field(metadata={"round": 3})  # GB/s
    busbw: float = field(metadata={"round": 3})  # GB/s
    #: JSON only: the ranks with the shortest and the longest time inside all_reduce (the longest is
    #: the one that waited most, not the late one: see Outlier)
    fastest_rank: int = 0
    slowest_rank: int = 0


@dataclass
class Outlier:
    host: str
    rank: int
    #: payload sizes at which the others waited for it
    sizes: int
    #: its all_reduce time over the median of the others' (the median over those sizes)
    ratio: float = field(metadata={"round": 3})
    #: payload sizes measured
    of: int = 0

    def describe(self) -> str:
        """``slowest: rank n2:1 — the others wait for it: 25.0x its own time ...``."""
        wait = f"{1 / self.ratio:.1f}x its own time" if self.ratio > 0 else "while it takes no time"
        return (
            f"slowest: rank {rank_label(self.host, self.rank)} — the others wait for it: {wait} in each"
            f" all_reduce, at {self.sizes} of {self.of} payload sizes (it arrives late: a slow rank or node;"
            " run `rankscope stacks` while it runs, or `gpu-test --isolate` on its node)"
        )


#: The line when no rank makes the others wait.
NO_SLOW_RANK = "slowest: no rank stands out (no rank makes the others wait at most payload sizes)"


@dataclass
class BenchResult:
    SCHEMA: ClassVar[str] = "rankscope.bench.allreduce/1"

    backend: str
    world_size: int
    dtype: str
    warmup: int
    iters: int
    rows: list[Row] = field(default_factory=list)
    outliers: list[Outlier] = field(default_factory=list)
    ranks: list[RankTimes] = field(default_factory=list)


def bus_factor(world_size: int) -> float:
    return 2 * (world_size - 1) / world_size if world_size > 1 else 0.0


def analyse(
    backend: str,
    sizes: Sequence[int],
    element_size: int,
    ranks: Sequence[RankTimes],
    warmup: int,
    iters: int,
    dtype: str = "float32",
) -> BenchResult:
    """The collective finishes when its slowest rank does: a row's time is the largest per-rank mean."""
    n = len(ranks)
    result = BenchResult(backend, n, dtype, warmup, iters, ranks=list(ranks))
    for index, size in enumerate(sizes):
        times = [(r.seconds[index], r.rank) for r in ranks]
        slowest, slow_rank = max(times)
        _, fast_rank = min(times)
        algbw = size / slowest / 1e9 if slowest > 0 else 0.0
        result.rows.append(
            Row(size, size // element_size, slowest * 1e6, algbw, algbw * bus_factor(n), fast_rank, slow_rank)
        )
    result.outliers = waited_for(ranks, len(sizes))
    return result


def waited_for(ranks: Sequence[RankTimes], count: int) -> list[Outlier]:
    """Ranks that arrive late spend the least time inside the collective: the others wait for them.

    A rank is named when, at more than half of the payload sizes, its time is below WAITED_FOR_RATIO
    of the median of the other ranks' times.
    """
    if len(ranks) < 2 or count == 0:
        return []
    flagged = []
    for rank in ranks:
        hits, ratios = 0, []
        for index in range(count):
            others = statistics.median(r.seconds[index] for r in ranks if r is not rank)
            if others <= 0:
                continue
            ratio = rank.seconds[index] / others
            ratios.append(ratio)
            if ratio < WAITED_FOR_RATIO:
                hits += 1
        if hits * 2 > count:
            flagged.append(Outlier(rank.host, rank.rank, hits, statistics.median(ratios), count))
    return flagged


def human_bytes(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B" if size < 1024 else f"{size / 1024:.1f}K"


def parse_size(text: str) -> int:
    """``64K``, ``16M``, ``1G`` or a number of bytes."""
    text = text.strip().upper()
    if text.endswith("B"):
        text = text[:-1]
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    value = int(float(number) * scale)
    if value <= 0:
        raise ValueError(f"{text} is not a positive size")
    return value


def sweep(min_bytes: int, max_bytes: int, factor: int, element_size: int = 4) -> list[int]:
    """nccl-tests' -b/-e/-f: sizes from min to max, multiplied by ``factor``, whole elements only."""
    sizes, size = [], max(min_bytes, element_size)
    while size <= max_bytes:
        sizes.append(size - size % element_size)
        size *= max(2, factor)
    return sizes


def table_lines(result: BenchResult) -> list[str]:
    lines = [
        f"all_reduce {result.dtype}, {result.world_size} ranks, {result.backend};"
        f" {result.warmup} warm-up + {result.iters} timed iterations per size",
        f"{'size':>8} {'count':>10} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}",
    ]
    for row in result.rows:
        lines.append(
            f"{human_bytes(row.size):>8} {row.elements:>10} {row.time_us:>10.1f} {row.algbw:>12.3f}"
            f" {row.busbw:>12.3f}"
        )
    if result.rows:
        peak = max(result.rows, key=lambda r: r.busbw)
        lines.append(
            f"peak busbw {peak.busbw:.3f} GB/s at {human_bytes(peak.size)} (busbw = algbw * 2(n-1)/n)"
        )
    lines += [o.describe() for o in result.outliers] or [NO_SLOW_RANK]
    return lines

"""algbw/busbw arithmetic (nccl-tests' formula), the size sweep, and naming the rank the others wait for."""

from __future__ import annotations

import pytest

from rankscope.gputest.bandwidth import RankTimes, analyse, bus_factor, parse_size, sweep, table_lines


def test_busbw_is_algbw_times_two_n_minus_one_over_n() -> None:
    ranks = [RankTimes("n1", r, [0.001, 0.002]) for r in range(4)]
    result = analyse("gloo", [1 << 20, 1 << 22], 4, ranks, warmup=1, iters=2)
    first = result.rows[0]
    assert first.algbw == pytest.approx((1 << 20) / 0.001 / 1e9)
    assert first.busbw == pytest.approx(first.algbw * 1.5)
    assert bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(1.75) and bus_factor(1) == 0.0
    assert result.outliers == []


def test_the_row_time_is_the_slowest_rank() -> None:
    ranks = [RankTimes("n1", 0, [0.002]), RankTimes("n1", 1, [0.004])]
    (row,) = analyse("gloo", [4096], 4, ranks, 0, 1).rows
    assert row.time_us == pytest.approx(4000) and row.slowest_rank == 1 and row.fastest_rank == 0


def test_the_rank_the_others_wait_for_is_named() -> None:
    times = {0: [0.05, 0.06, 0.05], 1: [0.002, 0.003, 0.002], 2: [0.05, 0.05, 0.06], 3: [0.05, 0.055, 0.05]}
    ranks = [RankTimes("n2" if r == 1 else "n1", r, t) for r, t in times.items()]
    result = analyse("gloo", [1024, 4096, 16384], 4, ranks, 0, 1)
    (outlier,) = result.outliers
    assert (outlier.host, outlier.rank) == ("n2", 1)
    lines = table_lines(result)
    # the slow rank is named plainly, with how long the others wait for it (their median is 25x its time)
    (slowest,) = [line for line in lines if line.startswith("slowest:")]
    assert slowest.startswith("slowest: rank n2:1 — the others wait for it: 25.0x its own time"), slowest
    assert "at 3 of 3 payload sizes" in slowest
    assert not any("fast/slow" in line for line in lines)  # no column of rank pairs to decode


def test_when_no_rank_stands_out_the_table_says_so() -> None:
    ranks = [RankTimes("n1", r, [0.004, 0.005]) for r in range(3)]
    lines = table_lines(analyse("gloo", [1024, 4096], 4, ranks, 0, 1))
    assert [line for line in lines if line.startswith("slowest:")] == [
        "slowest: no rank stands out (no rank makes the others wait at most payload sizes)"
    ]


def test_sizes_and_sweep() -> None:
    assert parse_size("64K") == 65536 and parse_size("16MB") == 16 << 20 and parse_size("1000") == 1000
    with pytest.raises(ValueError):
        parse_size("0")
    assert sweep(1024, 16384, 4) == [1024, 4096, 16384]
    assert sweep(1, 8, 2) == [4, 8]  # whole float32 elements only

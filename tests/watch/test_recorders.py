"""The watcher's reading of the ranks' ``fr_status`` answers (rankscope.watch.recorders): pure parts."""

from __future__ import annotations

from rankscope.watch.recorders import MAX_PERIOD, cadence, progress_number


def test_a_ranks_number_sums_its_groups_and_none_when_it_names_none() -> None:
    assert progress_number({"groups": {"0": [12, 11], "1": [3, -1]}, "problem": None}) == 25
    assert progress_number({"groups": {}, "problem": "torch.distributed is not imported"}) is None
    assert progress_number({"groups": {"0": ["x", True]}}) is None  # garbage is no number
    assert progress_number("garbage") is None


def test_the_recorders_are_read_a_quarter_of_the_stall_apart_within_bounds() -> None:
    assert cadence(60, 1) == MAX_PERIOD
    assert cadence(20, 1) == 5
    assert cadence(2, 1) == 1  # never more often than the looks

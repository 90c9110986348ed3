"""The --isolate planner and the reading of its results: pure, one case per kind of culprit."""

from __future__ import annotations

from rankscope.gputest.isolate import describe, plan_stages, read_results, skip_known_bad


def test_plan_is_alone_then_ring_pairs_then_all_and_no_subset_twice() -> None:
    # Four devices: the halves (0,1) and (2,3) are already pairs, so that stage is empty.
    assert plan_stages([0, 1, 2, 3]) == [
        ("alone", [(0,), (1,), (2,), (3,)]),
        ("pairs", [(0, 1), (1, 2), (2, 3), (3, 0)]),
        ("all", [(0, 1, 2, 3)]),
    ]


def test_eight_devices_get_halves_and_two_devices_no_repeats() -> None:
    stages = dict(plan_stages(list(range(8))))
    assert stages["halves"] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert len(stages["pairs"]) == 8
    assert plan_stages([5, 7]) == [("alone", [(5,), (7,)]), ("pairs", [(5, 7)])]


def test_subsets_with_a_device_bad_alone_are_skipped() -> None:
    assert skip_known_bad([(0, 1), (1, 2), (2, 3)], [2]) == [(0, 1)]


def test_a_device_that_fails_alone_is_named_and_not_its_pairs() -> None:
    verdict = read_results({(0,): True, (1,): True, (2,): False, (3,): True, (0, 1): True, (2, 3): False})
    assert verdict.bad_devices == [2]
    assert verdict.bad_links == []
    assert "device 2 fails on its own" in describe(verdict)[0]


def test_a_pair_that_fails_though_both_pass_alone_is_a_link() -> None:
    verdict = read_results(
        {(0,): True, (1,): True, (2,): True, (1, 2): False, (0, 1): True, (0, 1, 2): False}
    )
    assert verdict.bad_links == [(1, 2)]
    assert verdict.bad_groups == []  # explained by the link
    assert "devices 1 and 2 each pass alone but fail together" in describe(verdict)[0]


def test_a_group_failing_with_every_pair_passing_is_named_as_a_group() -> None:
    results = {(d,): True for d in range(4)}
    results.update({(0, 1): True, (1, 2): True, (2, 3): True, (3, 0): True, (0, 1, 2, 3): False})
    verdict = read_results(results)
    assert verdict.bad_groups == [(0, 1, 2, 3)]
    assert not verdict.ok


def test_all_passing_says_so() -> None:
    verdict = read_results({(0,): True, (1,): True, (0, 1): True})
    assert verdict.ok
    assert describe(verdict) == ["every subset passed: no device or link of this node fails the test"]

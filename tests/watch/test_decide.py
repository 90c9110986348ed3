"""The watcher's decisions on synthetic snapshots (rankscope.watch.decide is pure)."""

from __future__ import annotations

from rankscope.watch.decide import Decider
from rankscope.watch.model import Exit, RankSample, Reason, Snapshot


def ranks(*calls_steps: tuple[int, int]) -> tuple[RankSample, ...]:
    return tuple(RankSample(100 + r, r, calls, step) for r, (calls, step) in enumerate(calls_steps))


def test_markers_that_stop_for_the_stall_time_make_one_stall() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    assert decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1)))) == []
    assert decider.decide(Snapshot(5.0, ranks((2, 2), (2, 2)))) == []
    assert decider.decide(Snapshot(14.0, ranks((2, 2), (2, 2)))) == []
    [stall] = decider.decide(Snapshot(15.0, ranks((2, 2), (2, 2))))
    assert stall.reason == Reason.STALL and stall.signal == "progress markers"
    assert "10 s" in stall.text
    assert decider.decide(Snapshot(40.0, ranks((2, 2), (2, 2)))) == []  # reported once
    decider.decide(Snapshot(41.0, ranks((3, 3), (3, 3))))  # it moved again: a new stall may come
    assert [t.reason for t in decider.decide(Snapshot(51.0, ranks((3, 3), (3, 3))))] == [Reason.STALL]


def test_one_rank_advancing_is_no_stall() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    for second in range(0, 60, 5):
        assert decider.decide(Snapshot(float(second), ranks((1, 1), (second, second)))) == []


def test_without_markers_the_output_files_decide_and_the_watchers_own_line_is_no_news() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    quiet = (RankSample(1, 0), RankSample(2, 1))
    assert decider.decide(Snapshot(0.0, quiet, outputs=(("/log", 10, 1.0),))) == []
    assert decider.decide(Snapshot(8.0, quiet, outputs=(("/log", 20, 2.0),))) == []
    [stall] = decider.decide(Snapshot(18.0, quiet, outputs=(("/log", 20, 2.0),)))
    assert stall.signal == "output files"
    decider.rebase_outputs((("/log", 90, 3.0),))  # the watcher wrote its line there
    assert decider.decide(Snapshot(30.0, quiet, outputs=(("/log", 90, 3.0),))) == []


def test_markers_present_output_noise_does_not_hide_a_stall() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1)), outputs=(("/log", 1, 1.0),)))
    [stall] = decider.decide(Snapshot(12.0, ranks((1, 1), (1, 1)), outputs=(("/log", 2, 2.0),)))
    assert stall.reason == Reason.STALL


def test_ranks_that_are_all_ending_give_no_stall_but_one_still_running_does() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1))))
    ending = (RankSample(100, 0, ending=True), RankSample(101, 1, ending=True))
    assert decider.decide(Snapshot(30.0, ending, outputs=(("/log", 1, 1.0),))) == []
    other = Decider(stall=10, straggler_steps=0)
    other.decide(Snapshot(0.0, ranks((1, 1), (1, 1))))
    one_left = (RankSample(100, 0, 1, 1), RankSample(101, 1, ending=True))
    assert other.decide(Snapshot(9.0, one_left)) == []  # rank 1 began its exit: the clock starts again
    assert other.decide(Snapshot(18.0, one_left)) == []
    [stall] = other.decide(Snapshot(19.0, one_left))  # rank 0, still running, is quiet for 10 s
    assert stall.signal == "progress markers"


def test_nothing_to_watch_gives_no_stall() -> None:
    decider = Decider(stall=1, straggler_steps=0)
    quiet = (RankSample(1, 0), RankSample(2, 1))
    assert decider.decide(Snapshot(0.0, quiet)) == decider.decide(Snapshot(100.0, quiet)) == []


def test_a_denied_stall_starts_the_clock_again() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1))))
    assert decider.decide(Snapshot(10.0, ranks((1, 1), (1, 1))))
    decider.not_stalled(11.0)
    assert decider.decide(Snapshot(20.0, ranks((1, 1), (1, 1)))) == []
    assert decider.decide(Snapshot(21.0, ranks((1, 1), (1, 1))))


def test_new_workers_restart_the_clock() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((5, 5), (5, 5))))
    restarted = (RankSample(300, 0, 1, 0), RankSample(301, 1, 1, 0))  # elastic restart: new pids
    assert decider.decide(Snapshot(9.0, restarted)) == []
    assert decider.decide(Snapshot(18.0, restarted)) == []


def test_straggler_once_until_it_catches_up() -> None:
    decider = Decider(stall=100, straggler_steps=5)
    assert decider.decide(Snapshot(0.0, ranks((1, 4), (1, 0), (1, 3)))) == []
    [late] = decider.decide(Snapshot(1.0, ranks((2, 9), (2, 3), (2, 8))))
    assert late.reason == Reason.STRAGGLER and late.ranks == (1,)
    assert late.text == "rank 1 at step 3, 6 steps behind (step 9)"
    assert decider.decide(Snapshot(2.0, ranks((3, 12), (3, 4), (3, 12)))) == []
    assert decider.decide(Snapshot(3.0, ranks((4, 12), (4, 11), (4, 12)))) == []  # caught up
    [again] = decider.decide(Snapshot(4.0, ranks((5, 20), (5, 12), (5, 20))))
    assert again.ranks == (1,)


def test_straggler_off_with_zero_steps() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    assert decider.decide(Snapshot(0.0, ranks((1, 100), (1, 0)))) == []


def test_a_rank_that_failed_while_others_live_is_a_death() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    others = (RankSample(100, 0), RankSample(102, 2))
    decider.decide(Snapshot(-1.0, (*others, RankSample(101, 1))))
    [death] = decider.decide(Snapshot(0.0, others, exits=(Exit(101, 1, 1),)))
    assert death.reason == Reason.DEATH and death.ranks == (1,)
    assert death.text == "rank 1 (pid 101) exited with code 1 while 2 other ranks still ran"
    [killed] = decider.decide(Snapshot(1.0, others[:1], exits=(Exit(102, 2, -9),)))
    assert killed.text == "rank 2 (pid 102) was killed by signal 9 while another rank still ran"


def test_the_old_generations_last_rank_is_no_death_beside_the_restarted_workers() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1))))  # pids 100, 101
    [death] = decider.decide(Snapshot(1.0, ranks((1, 1)), exits=(Exit(101, 1, 1),)))
    assert death.ranks == (1,)
    restarted = (RankSample(300, 0), RankSample(301, 1))
    assert decider.decide(Snapshot(2.0, restarted, exits=(Exit(100, 0, -15),))) == []
    # A rank of the new generation that fails while its peers live is a death again.
    assert decider.decide(Snapshot(3.0, restarted[:1], exits=(Exit(301, 1, 1),)))[0].ranks == (1,)


def test_a_finished_rank_or_the_last_rank_is_no_death() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    assert decider.decide(Snapshot(0.0, ranks((1, 1)), exits=(Exit(101, 1, 0),))) == []
    assert decider.decide(Snapshot(1.0, (), exits=(Exit(100, 0, 1),))) == []  # the job ends


def test_a_failure_found_with_its_generations_teardown_in_one_look_is_the_death_of_the_failed_rank() -> None:
    """A watcher that looks late (a loaded machine) finds the rank that raised and the ranks its launcher
    stopped since (SIGTERM, or a .term dump of the in-process handler) gone at once: still a death, of
    the rank that raised. Before, the others no longer running made it the end of the job."""
    decider = Decider(stall=100, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1), (1, 1))))  # pids 100-102
    raised = Exit(101, 1, None, marker_left=True)  # reaped by its launcher first: the marker says it died
    stopped = (Exit(100, 0, -15, marker_left=True), Exit(102, 2, None, marker_left=True, term_dump=True))
    [death] = decider.decide(Snapshot(1.0, (), exits=(stopped[0], raised, stopped[1])))
    assert death.reason == Reason.DEATH and death.ranks == (1,)
    assert (
        death.text
        == "rank 1 (pid 101) died; the other ranks of its attempt ended too before the watcher looked"
    )
    # A rank that raised while another still ran names only itself, not the ranks stopped with it.
    restarted = (RankSample(200, 0), RankSample(201, 1), RankSample(202, 2))
    decider.decide(Snapshot(4.0, restarted))
    [one] = decider.decide(Snapshot(5.0, restarted[:1], exits=(Exit(201, 1, 1), Exit(202, 2, -15))))
    assert one.ranks == (1,) and one.text.endswith("while another rank still ran")


def test_ranks_found_gone_together_after_a_death_or_all_stopped_are_a_teardown() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1), (1, 1))))  # pids 100-102
    assert len(decider.decide(Snapshot(1.0, ranks((1, 1), (1, 1))[::2], exits=(Exit(101, 1, 1),)))) == 1
    # Ranks 0 and 2, stopped by the launcher after that death, reaped before their codes were read
    # (SIGTERM ran no atexit: their markers stayed).
    later = (Exit(100, 0, None, marker_left=True), Exit(102, 2, None, marker_left=True))
    assert decider.decide(Snapshot(2.0, (), exits=later)) == []
    # Every rank stopped at once (a scheduler's SIGTERM to the job): the job's end, as before.
    decider.decide(Snapshot(3.0, (RankSample(300, 0), RankSample(301, 1))))
    assert decider.decide(Snapshot(4.0, (), exits=(Exit(300, 0, -15), Exit(301, 1, -15)))) == []


def test_a_failure_beside_ranks_that_finished_in_the_same_look_is_no_death() -> None:
    """Ranks that exited 0 may have finished before the last one failed: the end of the job, as when
    the watcher sees them one look apart."""
    decider = Decider(stall=100, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1), (1, 1))))
    assert decider.decide(Snapshot(1.0, (), exits=(Exit(100, 0, 0), Exit(101, 1, 1)))) == []


def test_an_exit_code_lost_but_a_marker_left_is_a_death() -> None:
    decider = Decider(stall=100, straggler_steps=0)
    decider.decide(Snapshot(-1.0, ranks((1, 1))))
    gone = Exit(101, 1, None, marker_left=True)
    assert [t.reason for t in decider.decide(Snapshot(0.0, ranks((1, 1)), exits=(gone,)))] == [Reason.DEATH]
    assert decider.decide(Snapshot(1.0, ranks((1, 1)), exits=(Exit(102, 2, None),))) == []


def test_without_markers_or_outputs_the_recorders_decide() -> None:
    """A job with neither markers nor output files: its ranks' recorder numbers (rankscope.watch.recorders)."""
    decider = Decider(stall=10, straggler_steps=0)
    quiet = (RankSample(1, 0), RankSample(2, 1))
    for second in range(0, 40, 5):  # one rank's recorder moves: the job advances
        assert decider.decide(Snapshot(float(second), quiet, recorders=((1, 7), (2, second)))) == []
    assert decider.decide(Snapshot(44.0, quiet, recorders=((1, 7), (2, 35)))) == []
    [stall] = decider.decide(Snapshot(45.0, quiet, recorders=((1, 7), (2, 35))))
    assert stall.signal == "flight recorders" and stall.text == "no flight recorder advanced for 10 s"


def test_the_recorders_count_only_without_markers_and_outputs() -> None:
    decider = Decider(stall=10, straggler_steps=0)
    quiet = (RankSample(1, 0),)
    decider.decide(Snapshot(0.0, quiet, outputs=(("/log", 1, 1.0),), recorders=((1, 1),)))
    [stall] = decider.decide(Snapshot(12.0, quiet, outputs=(("/log", 1, 1.0),), recorders=((1, 9),)))
    assert stall.signal == "output files"  # the log is silent: a recorder that moves does not hide it
    decider = Decider(stall=10, straggler_steps=0)
    decider.decide(Snapshot(0.0, ranks((1, 1)), recorders=((100, 1),)))
    [stall] = decider.decide(Snapshot(12.0, ranks((1, 1)), recorders=((100, 9),)))
    assert stall.signal == "progress markers"


def test_after_a_death_the_ranks_the_launcher_stops_one_by_one_are_its_teardown() -> None:
    """Seen on a real 3-rank torchrun job: rank 1 raised (or was SIGKILLed), torchrun SIGTERMed the
    others, and rank 2 was found gone while rank 0 still ran. That was a second `death` capture, named
    after rank 2; it is the teardown of the first. So is a rank whose collective then fails by itself
    (gloo: "Connection closed by peer", exit code 1), racing the launcher's SIGTERM."""
    decider = Decider(stall=100, straggler_steps=0)
    r0, r1, r2, r3 = (RankSample(100 + r, r) for r in range(4))
    decider.decide(Snapshot(0.0, (r0, r1, r2, r3)))
    [death] = decider.decide(Snapshot(1.0, (r0, r2, r3), exits=(Exit(101, 1, -9),)))
    assert death.ranks == (1,)
    assert decider.decide(Snapshot(1.1, (r0, r3), exits=(Exit(102, 2, -15),))) == []
    # reaped by its launcher before its code was read, its marker left: the teardown too
    assert decider.decide(Snapshot(1.2, (r0,), exits=(Exit(103, 3, None, marker_left=True),))) == []
    # Without a death before it, a rank stopped by SIGTERM while others run is a death (someone ended it).
    fresh = Decider(stall=100, straggler_steps=0)
    fresh.decide(Snapshot(0.0, (r0, r1, r2, r3)))
    [stopped] = fresh.decide(Snapshot(1.0, (r0, r1, r3), exits=(Exit(102, 2, -15),)))
    assert stopped.reason == Reason.DEATH and stopped.ranks == (2,)
    # After it, a rank whose own code is an error is its consequence too (its collective lost a peer);
    # one killed by another signal is a death of its own.
    assert fresh.decide(Snapshot(2.0, (r0, r1), exits=(Exit(103, 3, 1),))) == []
    [killed] = fresh.decide(Snapshot(2.5, (r0,), exits=(Exit(101, 1, -9),)))
    assert killed.ranks == (1,)
    # The next generation (an elastic restart) has a death of its own again.
    restarted = (RankSample(200, 0), RankSample(201, 1), RankSample(202, 2))
    fresh.decide(Snapshot(3.0, restarted))
    assert fresh.decide(Snapshot(4.0, restarted[:2], exits=(Exit(202, 2, 1),)))[0].ranks == (2,)


def test_a_rank_that_exited_0_while_the_others_ran_is_named_in_the_death_and_stall_that_follow() -> None:
    """Seen on a real 3-rank gloo job: rank 1 returned from its main before the last barrier (exit 0,
    which no launcher reports), rank 0's barrier failed with "Connection closed by peer" and the death
    named only rank 0, whose error is a consequence. The watcher alone saw rank 1 go first: it says so."""
    decider = Decider(stall=10, straggler_steps=0)
    r0, r1, r2 = (RankSample(100 + r, r) for r in range(3))
    logs = (("/log", 1, 1.0),)
    decider.decide(Snapshot(0.0, (r0, r1, r2), outputs=logs))
    assert decider.decide(Snapshot(1.0, (r0, r2), exits=(Exit(101, 1, 0),), outputs=logs)) == []
    [death] = decider.decide(Snapshot(1.5, (r2,), exits=(Exit(100, 0, 1),), outputs=logs))
    assert death.ranks == (0,)
    assert death.text == (
        "rank 0 (pid 100) exited with code 1 while another rank still ran; "
        "rank 1 (pid 101) exited with code 0 while the others still ran (0.5 s before)"
    )
    # The same where the others hang instead (NCCL): the stall says it too.
    hung = Decider(stall=10, straggler_steps=0)
    hung.decide(Snapshot(0.0, (r0, r1, r2), outputs=logs))
    hung.decide(Snapshot(1.0, (r0, r2), exits=(Exit(101, 1, None),), outputs=logs))  # reaped first
    [stall] = hung.decide(Snapshot(12.0, (r0, r2), outputs=logs))
    assert stall.text == (
        "no output file advanced for 11 s; rank 1 (pid 101) ended, no error seen while the others "
        "still ran (11.0 s before)"
    )
    # A job whose ranks all finish names no one; new workers (a restart) start anew.
    done = Decider(stall=10, straggler_steps=0)
    done.decide(Snapshot(0.0, (r0, r1)))
    assert done.decide(Snapshot(1.0, (), exits=(Exit(100, 0, 0), Exit(101, 1, 0)))) == []
    assert done.early_words(2.0) == ""
    decider.decide(Snapshot(3.0, (RankSample(200, 0), RankSample(201, 1))))
    assert decider.early_words(4.0) == ""

"""Each rank's progress step beside its stack (pure: synthetic reports, the words and the JSON)."""

from __future__ import annotations

from typing import Optional

from tests.stacks.test_analysis import ALL_REDUCE, LOAD, LOOP, MAIN, SYNC, WRAP, report_of, snap

from rankscope.stacks.analyse import diagnose
from rankscope.stacks.render import render_text
from rankscope.stacks.report import StacksReport, StepInfo, load_report, report_document


def with_steps(steps: dict[int, Optional[StepInfo]]) -> StacksReport:
    """Ranks 0-2 in one all_reduce (same line), rank 3 loading data; each rank's marker as given."""
    report = report_of(
        *[snap(r, MAIN, LOOP, SYNC, WRAP, ALL_REDUCE) for r in (0, 1, 2)], snap(3, MAIN, LOOP, LOAD)
    )
    for process in report.processes:
        process.progress = steps.get(process.rank.rank or 0)
    report.diagnosis = diagnose(report)
    return report


def test_ranks_on_one_line_at_different_steps_are_told_apart() -> None:
    report = with_steps({0: StepInfo(7), 1: StepInfo(8), 2: StepInfo(8), 3: StepInfo(8, {"phase": "data"})})
    text = render_text(report, report.diagnosis)
    assert "ranks 0-2 · at different steps: step 7: rank 0; step 8: ranks 1-2" in text
    assert "rank 3 · step 8 phase=data" in text
    note = next(n for n in report.diagnosis.notes if "different steps" in n)
    assert "rank 0 is behind" in note and "desync" in note
    waiting = report.diagnosis.findings[0]
    assert waiting.steps == {"7": "rank 0", "8": "ranks 1-2"}
    # The JSON keeps each rank's marker and the finding's steps, and reads back.
    document = report_document(report)
    assert document["processes"][3]["progress"] == {"step": 8, "labels": {"phase": "data"}, "age": 0.0}
    assert document["diagnosis"]["findings"][0]["steps"] == {"7": "rank 0", "8": "ranks 1-2"}
    assert load_report(document).processes[0].progress == StepInfo(7)


def test_agreeing_ranks_show_one_step_and_no_note() -> None:
    report = with_steps({r: StepInfo(5, {"phase": "fwd"}) for r in range(4)})
    text = render_text(report, report.diagnosis)
    assert "ranks 0-2 · step 5 phase=fwd" in text
    assert not any("different steps" in n for n in report.diagnosis.notes)
    assert report.diagnosis.findings[0].steps is None
    assert "steps" not in report_document(report)["diagnosis"]["findings"][0]


def test_ranks_without_a_marker_are_named_and_nothing_is_shown_without_any() -> None:
    report = with_steps({0: StepInfo(5), 1: StepInfo(5)})
    assert "ranks 0-2 · steps: step 5: ranks 0-1; no marker: rank 2" in render_text(report, report.diagnosis)
    bare = with_steps({})
    text = render_text(bare, bare.diagnosis)
    assert " · " not in text and "progress" not in report_document(bare)["processes"][0]

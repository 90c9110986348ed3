"""The text of `why` on a node with several jobs (pure; the real jobs' JSON is checked in
tests/stacks/test_several_jobs.py): one line naming the jobs, then each job's report under its name,
the one with a named cause first whatever the order the jobs were found in, and its exit code."""

from __future__ import annotations

import time

import pytest

from rankscope.cli.why import WhyRequest
from rankscope.cli.why_jobs import show_each
from rankscope.why.kernel import parse_kernel
from rankscope.why.options import WhyOptions
from rankscope.why.several import JobTarget
from rankscope.why.signals import Gathered

OOM = (
    "2026-11-26T00:12:03,123600+00:00 Out of memory: Killed process 4243 (python) total-vm:81234567kB, "
    "anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:123456kB oom_score_adj:0"
)


def test_each_job_has_its_section_the_named_cause_first(capsys: pytest.CaptureFixture[str]) -> None:
    quiet, killed = JobTarget("torchrun pid 100", (100,)), JobTarget("torchrun pid 200", (200,))
    collected = [
        (quiet, Gathered(hosts=["vm"])),
        (killed, Gathered(hosts=["vm"], kernel=parse_kernel([OOM]), pid_rank={4243: 3})),
    ]
    code = show_each(WhyRequest(options=WhyOptions()), [quiet, killed], collected, time.monotonic())
    out = capsys.readouterr().out
    assert code == 15
    assert out.startswith(
        "rankscope why: 2 jobs on this node (torchrun pid 100, torchrun pid 200), each weighed apart, "
        "the strongest verdict first; one alone: rankscope why --pid LAUNCHER_PID\n"
    )
    first, second = out.index("\n── torchrun pid 200 ──\n"), out.index("\n── torchrun pid 100 ──\n")
    assert first < second
    assert "Verdict: rank 3 was killed by the kernel's OOM killer" in out[first:second]

"""Two real hung torchrun jobs on one node: each diagnosed apart, in its own section."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import READY_TIMEOUT, torchrun_job

from rankscope.demo.launch import LaunchedJob

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LaunchedJob, LaunchedJob]]:
    """Job A: rank 1 deadlocks on a lock (rank 0 in all_reduce). Job B: rank 0 never reaches the barrier."""
    with (
        torchrun_job(
            tmp_path_factory.mktemp("job-a"), "--scenario", "lock", "--culprit", "1", ready=False
        ) as a,
        torchrun_job(
            tmp_path_factory.mktemp("job-b"), "--scenario", "skip-barrier", "--culprit", "0", ready=False
        ) as b,
    ):
        a.wait_ready(timeout=READY_TIMEOUT)  # both started first: their start-ups overlap
        b.wait_ready(timeout=READY_TIMEOUT)
        yield a, b


def test_each_job_has_its_own_diagnosis_in_json(two_jobs: tuple[LaunchedJob, LaunchedJob]) -> None:
    a, b = two_jobs
    result = run_cli("stacks", "--pid", str(a.pid), "--pid", str(b.pid), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = result.json()
    jobs = {j["launcher_pid"]: j for j in doc["jobs"]}
    assert sorted(jobs[a.pid]["pids"]) == a.worker_pids()
    assert sorted(jobs[b.pid]["pids"]) == b.worker_pids()
    job_a, job_b = jobs[a.pid]["diagnosis"], jobs[b.pid]["diagnosis"]
    assert job_a["divergent_ranks"] == [1]
    assert {m["pid"] for m in job_a["divergent"]} <= set(a.worker_pids())
    assert "rank 1 is elsewhere: update_index" in job_a["headline"]
    assert job_b["divergent_ranks"] == [0]
    assert "rank 0 is elsewhere: load_batch" in job_b["headline"]
    # Neither job's ranks leak into the other's findings.
    assert _pids(job_a) == set(a.worker_pids()) and _pids(job_b) == set(b.worker_pids())
    # The top-level diagnosis joins both, each under its job's name.
    assert doc["diagnosis"]["headline"].startswith(f"torchrun pid {a.pid}: ")
    assert f" | torchrun pid {b.pid}: " in doc["diagnosis"]["headline"]
    divergent = {(m["pid"], m["rank"]) for m in doc["diagnosis"]["divergent"]}
    assert divergent == {(m["pid"], m["rank"]) for m in job_a["divergent"] + job_b["divergent"]}


def _pids(diagnosis: dict) -> set[int]:
    return {m["pid"] for f in diagnosis["findings"] for m in f["members"]}


def test_text_has_a_section_per_job(two_jobs: tuple[LaunchedJob, LaunchedJob]) -> None:
    a, b = two_jobs
    result = run_cli("stacks", "--pid", str(a.pid), "--pid", str(b.pid))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    head_a = f"── torchrun pid {a.pid}: ranks 0-1, world size 2, 2 of 2 processes dumped ──"
    head_b = f"── torchrun pid {b.pid}: ranks 0-1, world size 2, 2 of 2 processes dumped ──"
    assert head_a in out and head_b in out
    section_a, section_b = out.split(head_a)[1].split(head_b)
    assert "rank 1 is elsewhere: update_index" in section_a and "load_batch" not in section_a
    assert "rank 0 is elsewhere: load_batch" in section_b and "update_index" not in section_b
    for section in (section_a, section_b):
        assert section.count("Diagnosis") == 1 and section.count("Main thread") == 1


def test_discovery_reports_every_job_instead_of_asking(two_jobs: tuple[LaunchedJob, LaunchedJob]) -> None:
    a, b = two_jobs
    # Other jobs running on this machine may be found too: only these two are checked. --no-fr: the other
    # jobs' ranks that run the in-process handler are not asked for their flight recorders (a rank's first
    # such dump imports torch's compiler stack into it: seconds of CPU taken from another test).
    result = run_cli("stacks", "--json", "--no-fr")
    assert result.returncode in (0, 4), result.stdout + result.stderr
    jobs = {j["launcher_pid"]: j for j in result.json()["jobs"]}
    assert jobs[a.pid]["diagnosis"]["divergent_ranks"] == [1]
    assert jobs[b.pid]["diagnosis"]["divergent_ranks"] == [0]


def test_one_job_named_twice_is_one_job(two_jobs: tuple[LaunchedJob, LaunchedJob]) -> None:
    a, _ = two_jobs
    first, second = a.worker_pids()
    for pids in ([a.pid, a.pid], [first, second], [a.pid, second]):
        argv = [arg for pid in pids for arg in ("--pid", str(pid))]
        result = run_cli("stacks", *argv, "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        doc = result.json()
        (job,) = doc["jobs"]
        assert job["launcher_pid"] == a.pid and sorted(job["pids"]) == [first, second], pids
        assert "diagnosis" not in job and doc["diagnosis"]["divergent_ranks"] == [1]


def test_why_weighs_each_job_apart(two_jobs: tuple[LaunchedJob, LaunchedJob]) -> None:
    """`why` with no target: each job is collected and weighed alone, so neither verdict cites the
    other job's ranks (weighed together, job B's "rank 0 is elsewhere" was cited with job A's "rank 1
    is elsewhere"). Other tests' jobs may be on this machine too: only these two are checked."""
    a, b = two_jobs
    result = run_cli("why", "--json", timeout=180)
    assert result.returncode == 15, result.stdout + result.stderr
    first = result.json()
    documents = {d["job"]: d for d in [first, *first["other_jobs"]]}
    assert first["notes"][0].startswith(f"{len(documents)} jobs on this node (")
    job_a, job_b = documents[f"torchrun pid {a.pid}"], documents[f"torchrun pid {b.pid}"]
    assert (job_a["verdict"]["ranks"], job_a["verdict"]["location"]) == ([1], "update_index (hang_job.py:62)")
    assert (job_b["verdict"]["ranks"], job_b["verdict"]["location"]) == ([0], "load_batch (hang_job.py:68)")
    for document, other in ((job_a, "load_batch"), (job_b, "update_index")):
        texts = [e["text"] for e in document["verdict"]["evidence"]]
        assert not any(other in t for t in texts), texts
        assert "weighed together" not in " ".join(document["notes"])

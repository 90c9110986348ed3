"""The capture's document read back, its command line, and the watcher's private files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rankscope.watch.attempt import FIRST, Attempt
from rankscope.watch.capture import STACKS, WHY, capture_argv, copy_dumps, verdict_of
from rankscope.watch.collect import Watched
from rankscope.watch.index import append_index, new_capture_dir, private_dir, read_index, write_private
from rankscope.watch.loop import JobHandle, Watcher
from rankscope.watch.model import WatchOptions


def test_capture_argv_prefers_why_and_falls_back_to_stacks(tmp_path: Path) -> None:
    why = capture_argv(WHY, ["--pid", "42"], tmp_path / "c")
    assert why == [
        sys.executable,
        "-m",
        "rankscope",
        "why",
        "--pid",
        "42",
        "--out",
        str(tmp_path / "c"),
        "--json",
    ]
    stacks = capture_argv(STACKS, ["--jobid", "81"], tmp_path / "c")
    assert stacks[3:] == [
        "stacks",
        "--jobid",
        "81",
        "--out",
        str(tmp_path / "c" / "stacks"),
        "--json",
    ]


def test_a_restarted_attempt_reaches_why_and_a_why_without_a_cause_says_what_it_found(tmp_path: Path) -> None:
    attempt = Attempt({"/job/out.log": 563}, 1764117915.25)
    argv = capture_argv(WHY, ["--pid", "42"], tmp_path / "c", attempt)
    assert argv[3:10] == ["why", "--pid", "42", "--log-from", "/job/out.log:563", "--since", "1764117915.250"]
    assert "--log-from" not in capture_argv(STACKS, ["--pid", "42"], tmp_path / "c", attempt)
    assert "--since" not in capture_argv(WHY, ["--pid", "42"], tmp_path / "c")  # the first attempt: all of it


def test_verdict_of_a_stacks_document() -> None:
    document = {"diagnosis": {"headline": "rank 1 is elsewhere", "divergent_ranks": [1]}}
    assert verdict_of(document) == ("rank 1 is elsewhere", [1])


def test_verdict_of_a_why_document() -> None:
    # The shape of rankscope.why/1 (docs/why.md): the sentence and the culprit global ranks.
    verdict = {
        "cause": "sigkill",
        "text": "rank 3 was killed by SIGKILL",
        "ranks": [3, 3],
        "kind": "launcher",
    }
    assert verdict_of({"schema": "rankscope.why/1", "verdict": verdict}) == (
        "rank 3 was killed by SIGKILL",
        [3],
    )
    # No cause named: what it found instead of a verdict, no ranks.
    document = {"schema": "rankscope.why/1", "outcome": "no problem", "verdict": None}
    assert verdict_of(document) == ("no cause named (why: no problem)", [])


@pytest.mark.parametrize("document", [None, [], "text", {"verdict": 3}, {"diagnosis": []}])
def test_verdict_of_garbage_is_empty(document: object) -> None:
    assert verdict_of(document) == ("", [])


def test_files_are_private_and_never_written_through_a_link(tmp_path: Path) -> None:
    out = private_dir(tmp_path / "a" / "caps")
    assert oct(out.stat().st_mode & 0o777) == "0o700"
    first = new_capture_dir(out, "stall", now=0)
    second = new_capture_dir(out, "stall", now=0)
    assert (first.name, second.name) == ("19700101T000000Z-stall", "19700101T000000Z-stall-2")
    write_private(first, "watch.json", b"{}")
    assert oct((first / "watch.json").stat().st_mode & 0o777) == "0o600"
    with pytest.raises(FileExistsError):
        write_private(first, "watch.json", b"again")
    (tmp_path / "victim").write_text("keep")
    os.symlink(tmp_path / "victim", first / "link")
    with pytest.raises(OSError):
        write_private(first, "link", b"x")
    assert (tmp_path / "victim").read_text() == "keep"
    os.symlink(tmp_path / "victim", tmp_path / "linked-out")
    with pytest.raises(OSError):
        private_dir(tmp_path / "linked-out")


def test_index_lines_append_and_garbage_lines_are_skipped(tmp_path: Path) -> None:
    append_index(tmp_path, {"reason": "stall", "ranks": [1]})
    with open(tmp_path / "index.jsonl", "a") as handle:
        handle.write("not json\n")
    append_index(tmp_path, {"reason": "death", "ranks": []})
    assert [e["reason"] for e in read_index(tmp_path)] == ["stall", "death"]
    assert oct((tmp_path / "index.jsonl").stat().st_mode & 0o777) == "0o600"
    assert json.loads((tmp_path / "index.jsonl").read_text().splitlines()[0]) == {
        "ranks": [1],
        "reason": "stall",
    }


def test_copy_dumps_skips_what_it_cannot_read(tmp_path: Path) -> None:
    dump = tmp_path / "n.rank-0.pid-5.term"
    dump.write_text("Thread 0x1 (most recent call first):\n")
    os.symlink(dump, tmp_path / "n.rank-1.pid-6.term")
    (tmp_path / "cap").mkdir()
    copied = copy_dumps(
        [str(dump), str(tmp_path / "n.rank-1.pid-6.term"), str(tmp_path / "gone")], tmp_path / "cap"
    )
    assert copied == ["n.rank-0.pid-5.term"]
    assert (tmp_path / "cap" / "inproc" / dump.name).read_text().startswith("Thread")


def _gone_pid() -> int:
    """A pid that was a process a moment ago and is gone now (run, exited, reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_capture_of_a_job_whose_processes_are_gone_reads_its_output_files(tmp_path: Path) -> None:
    """Seen on real 2-rank torchrun jobs: torchrun ended within ~50 ms of a rank's death, so the death
    capture pointed `why --pid` at processes already gone and got no verdict. With none of the job's
    processes left the capture reads its output files; one still running is named as before."""
    log = tmp_path / "job.log"
    log.write_text("[rank1]: ValueError: bad shard\n")
    dead = _gone_pid()
    worker = Watched(pid=dead, rank=1, host="h", uid=0, directory="", start_ticks=0)
    watcher = Watcher(JobHandle([_gone_pid()]), tmp_path / "caps", WHY, WatchOptions(), lambda _l: None)
    watcher.workers = {dead: worker}
    watcher.outputs = [str(log)]
    assert watcher._targets(FIRST) == ["--log", str(log)]
    # an elastic restart's attempt: the file is still named (`--log-from` only says where to start in it)
    assert watcher._targets(Attempt({str(log): 10})) == ["--log", str(log)]
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watcher.workers = {alive.pid: replace(worker, pid=alive.pid)}
        assert watcher._targets(FIRST) == ["--pid", str(alive.pid), "--log", str(log)]
    finally:
        alive.kill()
        alive.wait()


def test_a_failed_job_whose_death_capture_named_no_culprit_gets_a_second_look_at_its_output(
    tmp_path: Path,
) -> None:
    """Seen in CI: rank 1 of a torch.multiprocessing.spawn job raised, the watcher read its exit code
    before the parent reaped it, and the death's capture read the output before the parent printed
    the traceback it relays from rank 1: no culprit. At the job's end its output is read again (here
    the real output of such a job); a death whose capture named its culprit gets no second look."""
    import signal

    from tests.support.leftovers import kill_marked, marked_env
    from tests.support.sshd import free_port

    log = tmp_path / "job.log"
    env, mark = marked_env(OMP_NUM_THREADS="1")
    script = Path(__file__).with_name("spawn_job.py")
    with open(log, "wb") as out:
        job = subprocess.Popen(
            [sys.executable, str(script), str(free_port()), "raise"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        assert job.wait(120) == 1, log.read_text(errors="replace")[-2000:]
    finally:
        kill_marked(mark)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    for named in (False, True):
        out = private_dir(tmp_path / f"caps-{named}")
        watcher = Watcher(JobHandle([_gone_pid()]), out, WHY, WatchOptions(), lambda _l: None)
        watcher.outputs = [str(log)]
        death = new_capture_dir(out, "death")
        watcher.captures.append(death)
        watcher.death_captures.append(death)
        watcher.death_named = named
        watcher._at_end(1)
        entries = read_index(out)
        if named:
            assert entries == [] and watcher.captures == [death]
            continue
        assert [e["reason"] for e in entries] == ["end"], entries
        assert entries[0]["ranks"] == [1] and "bad record in shard 3" in str(entries[0]["verdict"]), entries

"""`rankscope trace tail/grep/show` on real trace files: a 3-rank torchrun job, damaged files."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.jobs import torchrun_job
from tests.trace.conftest import run_program
from tests.trace.trace_events import check_trace_events

from rankscope.pictures.html import render_html
from rankscope.pictures.page import TimelineSection
from rankscope.pictures.timeline_page import TimelineBuilder, export_page
from rankscope.trace import format as fmt
from rankscope.trace.decode import decode
from rankscope.trace.export_write import export

JOB = """
import os, sys, time
import torch
import torch.distributed as dist
import rankscope

def load_shard(): pass

def step(t):
    dist.all_reduce(t)

def checkpoint():
    time.sleep(120)

def wait_for_others():
    dist.barrier()

def train():
    t = torch.ones(4)
    for _ in range(3000):
        load_shard()      # the 2048-record ring wraps: the calls of <module> and train are overwritten
    for i in range(5):
        step(t)
        rankscope.progress(step=i)
    if dist.get_rank() == 2:
        checkpoint()      # rank 2 is slow: the others wait in the barrier
    else:
        wait_for_others()

dist.init_process_group("gloo")
train()
"""


def _stuck_where(directory: Path) -> dict[int, list[str]]:
    """Each rank's open calls, once it waits where the job makes it wait (inside torch's barrier)."""
    found = {}
    for path in directory.glob("trace-*"):
        try:
            trace = decode(str(path), path.read_bytes(), last=1)
        except Exception:
            continue
        names = [c.name for c in trace.stacks[trace.meta["thread"]].calls]
        waiting = "checkpoint" in names or ("wait_for_others" in names and names[-1] != "wait_for_others")
        if waiting and trace.rank is not None:
            found[trace.rank] = names
    return found


@pytest.fixture(scope="module")
def stuck_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 3-rank torchrun job traced with ``rankscope trace run``: ranks 0-1 wait in a barrier for rank
    2, which sleeps. Yields the traces directory once every rank waits; killed in teardown."""
    rankscope = shutil.which("rankscope", path=os.path.dirname(sys.executable))
    if not rankscope:
        pytest.skip("the rankscope entry point is not installed beside this Python")
    tmp_path = tmp_path_factory.mktemp("job")
    (tmp_path / "train.py").write_text(JOB)
    out = tmp_path / "traces"
    trace_run = ["trace", "run", "--out", str(out), "--ring-size", "48K", "--include", "torch.distributed"]
    # torchrun --no-python rankscope trace run ... -- train.py; its workers and all they start are
    # stopped with it (torchrun_job), whatever session each runs in.
    with torchrun_job(
        tmp_path, *trace_run, "--", "train.py", nproc=3, script=Path(rankscope),
        torchrun_args=["--no-python"], ready=False,
    ) as job:  # fmt: skip
        deadline = time.monotonic() + 300  # three torch imports on a loaded 2-core machine take minutes
        while time.monotonic() < deadline and len(_stuck_where(out)) < 3 and job.process.poll() is None:
            time.sleep(0.5)
        assert len(_stuck_where(out)) == 3, job.log_tail()
        yield out


def test_a_traced_torchrun_job_writes_one_file_per_rank_and_tail_groups_them(stuck_job: Path) -> None:
    out = stuck_job
    files = sorted(p.name for p in out.glob("trace-*"))
    assert len(files) == 3 and all(name.startswith("trace-") for name in files)
    assert sorted(int(name.split("-")[-2]) for name in files) == [0, 1, 2]

    assert all(decode(str(p), p.read_bytes(), last=1).wraps >= 1 for p in out.glob("trace-*"))
    result = run_cli("trace", "tail", str(out), "-n", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # grouped by the open calls: the user's own frames first, never hidden by torch's (--include)
    assert lines[0].startswith("[0-1] train.py:15 wait_for_others > "), lines[0]
    at = lines.index("    open calls (innermost last):")
    assert lines[at + 1 : at + 4] == [
        "        train.py:1 <module>",
        "        train.py:18 train",
        "        train.py:15 wait_for_others",
    ]
    assert any(line.startswith("[2] train.py:12 checkpoint  (1 process)") for line in lines)

    doc = run_cli("trace", "tail", str(out), "--json").json()
    assert doc["schema"] == "rankscope.trace.tail/1"
    assert [(g["ranks"], len(g["files"])) for g in doc["groups"]] == [("[0-1]", 2), ("[2]", 1)]
    slow = doc["groups"][1]
    assert [c["name"] for c in slow["stack"]] == ["<module>", "train", "checkpoint"]
    assert not slow["partial"] and slow["files"][0]["last"]["name"] == "checkpoint"
    assert all(f["events"] and f["events"][0]["kind"] != "lap" for g in doc["groups"] for f in g["files"])

    grep = run_cli("trace", "grep", "call .*(wait_for_others|checkpoint)$", str(out), "--json").json()
    assert sorted(f["count"] for f in grep["files"]) == [1, 1, 1]


def test_export_of_the_job_is_valid_trace_event_json_with_open_calls_and_steps(
    stuck_job: Path, tmp_path: Path
) -> None:
    result = run_cli("trace", "export", str(stuck_job), "--out", str(tmp_path / "job.json"))
    assert result.returncode == 0, result.stderr
    assert "of 3 trace files" in result.stdout
    assert (tmp_path / "job.json").stat().st_mode & 0o777 == 0o600
    doc = json.loads((tmp_path / "job.json").read_text())
    checked = check_trace_events(doc)
    tail = run_cli("trace", "tail", str(stuck_job), "--json").json()
    expected = {f["rank"]: [c["name"] for c in f["stack"]] for g in tail["groups"] for f in g["files"]}
    by_rank = {}
    for pid, name in checked.process_names.items():
        rank = int(name.split()[1])
        assert name.startswith(f"rank {rank} (") and ", pid " in name
        by_rank[rank] = pid
    assert sorted(by_rank) == [0, 1, 2]
    for rank, pid in by_rank.items():
        # the calls open at the end of the ring: slices that did not end, the tail's stack
        assert [e["name"] for e in checked.open[pid, 1]] == expected[rank], rank
        outermost = checked.open[pid, 1][0]
        assert outermost["name"] == "<module>" and outermost["args"]["open_before"] is True
        assert checked.thread_names[pid, 1] == "MainThread (started tracing)"
        steps = [
            e["args"]["step"]
            for e in doc["traceEvents"]
            if e["ph"] == "i" and e["pid"] == pid and e.get("cat") == "progress"
        ]
        assert steps == [0, 1, 2, 3, 4]
        assert any(e["ph"] == "E" for e in checked.ordered[pid, 1])  # closed slices too
    assert doc["otherData"]["clock_skew"] == []  # one host: nothing to measure


def test_timeline_of_the_job_draws_each_rank_its_open_calls_and_steps(
    stuck_job: Path, tmp_path: Path
) -> None:
    """The section ``trace export --html`` draws, built from the same events the JSON gets."""
    builder = TimelineBuilder()
    result = export(str(stuck_job), str(tmp_path / "job.json"), builder)
    section = builder.section()
    tail = run_cli("trace", "tail", str(stuck_job), "--json").json()
    files = {f["rank"]: f for g in tail["groups"] for f in g["files"]}
    assert [row.label for row in section.rows] == [f"{files[r]['host']}:{r}" for r in range(3)]
    assert result.open_calls == sum(len(f["stack"]) for f in files.values())
    for rank, row in enumerate(section.rows):
        still = sorted((s for s in row.slices if s.open), key=lambda s: s.lane)
        assert [s.name for s in still] == [c["name"] for c in files[rank]["stack"]], rank
        assert all(s.end == row.end for s in still) and still[0].before  # <module>: open before the ring
        assert [step.step for step in row.steps] == [0, 1, 2, 3, 4]
        assert any(not s.open for s in row.slices)
        assert all(section.start <= s.start <= s.end <= row.end <= section.end for s in row.slices)
        assert all(0 <= s.lane < row.lanes for s in row.slices)
    assert any("calls still open at the end of their ring" in note for note in section.notes)
    assert len(render_html(export_page(result, builder, str(stuck_job)))) < 1_000_000


def test_timeline_keeps_the_longest_calls_and_counts_the_rest(stuck_job: Path, tmp_path: Path) -> None:
    everything = TimelineBuilder(max_slices=1 << 30)
    export(str(stuck_job), str(tmp_path / "all.json"), everything)
    capped = TimelineBuilder(max_slices=10)
    export(str(stuck_job), str(tmp_path / "ten.json"), capped)
    doc = json.loads((tmp_path / "ten.json").read_text())
    ended = sum(1 for e in doc["traceEvents"] if e["ph"] == "E")

    def durations(builder: TimelineBuilder) -> list[float]:
        return sorted(
            (s.end - s.start for r in builder.section().rows for s in r.slices if not s.open), reverse=True
        )

    assert len(durations(everything)) > 10
    assert durations(capped) == durations(everything)[:10]
    (note,) = [n for n in capped.section().notes if "calls that ended" in n]
    assert note.startswith(f"10 of {ended} calls that ended are drawn (the longest); {ended - 10} left out")


def test_export_shows_the_clock_skew_of_another_host(stuck_job: Path, tmp_path: Path) -> None:
    """One of the real rings is made to come from a host whose clock is 250 ms ahead (its
    metadata rewritten: this machine has one clock); the collectives they share measure it."""
    both = tmp_path / "two-hosts"
    both.mkdir()
    for path in sorted(stuck_job.glob("trace-*")):
        shutil.copy(path, both / path.name)
    moved = 0
    for path in sorted(both.glob("trace-*")):
        head = bytearray(path.read_bytes()[: fmt.HEADER_SIZE])
        fields = list(fmt.HEADER.unpack_from(head))
        meta = json.loads(head[fmt.META_OFFSET : fmt.META_OFFSET + fields[-1]])
        if meta["rank"] == 2:
            meta["host"], meta["wall_ns"] = "node2", meta["wall_ns"] + 250_000_000
            blob = json.dumps(meta).encode()
            fields[-1] = len(blob)
            fmt.HEADER.pack_into(head, 0, *fields)
            head[fmt.META_OFFSET : fmt.HEADER_SIZE] = blob + bytes(fmt.META_MAX - len(blob))
            with open(path, "r+b") as handle:
                handle.write(head)
            moved += 1
    assert moved == 1
    result = run_cli("trace", "export", str(both), "--out", str(tmp_path / "two.json"))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "two.json").read_text())
    check_trace_events(doc)
    (skew,) = doc["otherData"]["clock_skew"]
    # rankscope's document inside Chrome's format, its keys in this order (scripts read them)
    assert list(doc["otherData"]) == ["schema", "clock", "clock_skew", "unreadable"]
    assert doc["otherData"]["schema"] == "rankscope.trace.export/1" and list(skew) == [
        "host",
        "vs",
        "ms",
        "collectives",
    ]
    assert skew["host"] == "node2" and skew["collectives"] >= 5
    assert 150 < skew["ms"] < 350, skew  # 250 ms, within the collectives' spread on a loaded node
    assert "clock of node2 +" in result.stdout
    labels = [e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"]
    assert len(labels) == 1 and all(label.startswith("clock +") and "vs " in label for label in labels)
    # The timeline page notes it: each row of node2 carries its clock, the section says the skew.
    builder = TimelineBuilder()
    again = export(str(both), str(tmp_path / "again.json"), builder)
    section = export_page(again, builder, str(both)).sections[0]
    assert isinstance(section, TimelineSection)
    clocks = {row.label.split(":")[0]: row.clock for row in section.rows}
    assert clocks["node2"].startswith("clock +") and clocks[next(h for h in clocks if h != "node2")] == ""
    assert any(note.startswith("clock of node2 +") for note in section.notes)


SMALL = """
import rankscope.trace as rt

def work(): pass

path = rt.start(out="traces", ring_records=32)
work()
rt.stop()
print(path)
"""


def test_damaged_files_give_one_line_and_their_exit_code(tmp_path: Path) -> None:
    proc = run_program(sys.executable, SMALL, tmp_path)
    good = Path(proc.stdout.strip())
    show = run_cli("trace", "show", str(good))
    assert show.returncode == 0 and "call prog.py:4 work" in show.stdout
    assert run_cli("trace", "show", str(good), "--json").json()["schema"] == "rankscope.trace.show/1"

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "trace-n1-0-1").write_bytes(good.read_bytes()[: fmt.HEADER_SIZE + 100])  # cut short
    (damaged / "trace-n1-1-2").write_bytes(os.urandom(8192))  # not a trace
    newer = bytearray(good.read_bytes())
    newer[8:12] = (fmt.VERSION + 1).to_bytes(4, "little")
    (damaged / "trace-n1-2-3").write_bytes(bytes(newer))
    for name, words in (
        ("trace-n1-0-1", "truncated"),
        ("trace-n1-1-2", "no trace header"),
        ("trace-n1-2-3", "newer"),
    ):
        result = run_cli("trace", "show", str(damaged / name))
        assert result.returncode == 8, result.stderr
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr

    only_bad = run_cli("trace", "tail", str(damaged))
    assert only_bad.returncode == 8 and len(only_bad.stderr.strip().splitlines()) == 1
    shutil.copy(good, damaged / good.name)
    some_bad = run_cli("trace", "tail", str(damaged))
    assert some_bad.returncode == 4 and some_bad.stdout.count("unreadable:") == 3
    assert "trace stopped" in some_bad.stdout

    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = run_cli("trace", "tail", str(empty))
    assert nothing.returncode == 3 and "no trace-* files" in nothing.stderr
    assert run_cli("trace", "grep", "(", str(damaged)).returncode == 2


def test_trace_run_passes_the_program_s_exit_code_and_traceback_through(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys\ndef f():\n    raise RuntimeError('boom')\nif sys.argv[1:] == ['--exit']:\n    sys.exit(3)\nf()\n"
    )
    out = str(tmp_path / "traces")
    srun = {**os.environ, "SLURM_PROCID": "5", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "node7"}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        srun.pop(name, None)
    assert run_cli("trace", "run", "--out", out, "--", str(script), "--exit", env=srun).returncode == 3
    (named,) = (tmp_path / "traces").iterdir()
    assert named.name.startswith("trace-node7-5-")  # the rank an srun task gets
    failed = run_cli("trace", "run", "--out", out, "--", str(script))
    assert failed.returncode == 1 and failed.stderr.strip().endswith("RuntimeError: boom")
    assert 'prog.py", line 6, in <module>' in failed.stderr and "rankscope" not in failed.stderr
    traces = sorted((tmp_path / "traces").iterdir())
    assert len(traces) == 2
    calls = sorted(
        [e.name for e in decode(str(p), p.read_bytes()).events if e.kind == "call"] for p in traces
    )
    assert calls == [["<module>"], ["<module>", "f"]]
    assert run_cli("trace", "run", "--", str(tmp_path / "missing.py")).returncode == 8

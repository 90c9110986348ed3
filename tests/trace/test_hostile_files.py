"""The trace readers on large and hostile files: bounded memory, one line per bad file, the rest read.

Files come from the generator in tests/trace/hostile.py. Memory is the peak RSS of the real
command (a subprocess), against a generous bound; before the readers streamed, `trace show` of a
120 MB ring was killed by the OOM killer and `trace tail` of a 1.5 GB sparse ring reached 4.7 GB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.trace.hostile import (
    MAIN,
    NAMES,
    OTHER,
    header,
    names_region,
    one,
    records,
    ring_file,
    run_measured,
    write,
)
from tests.trace.trace_events import check_trace_events

from rankscope.trace import format as fmt

#: generous: the readers stay near 25 MiB whatever the file's size (they grew with it: about
#: 450 bytes a record for show and grep, and the whole file for tail)
BOUND_MIB = 100
RECORDS = 300_000  # 7 MB of records: every event decoded and held peaks at 76 MiB (measured)
#: the bound of the readers that stream every event of RECORDS records (show, grep, export):
#: twice what they take (22 MiB), well under what holding the events takes
STREAM_BOUND_MIB = 50


def test_show_streams_a_large_ring_in_bounded_memory(tmp_path: Path) -> None:
    path = ring_file(tmp_path / "trace-n1-0-4242", RECORDS, records(RECORDS))
    shown = run_measured(tmp_path, "trace", "show", str(path))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout_lines == 1 + RECORDS  # the head line, then every event
    assert shown.stdout.rstrip().endswith("return train.py:10 step")
    assert shown.peak_mib < STREAM_BOUND_MIB, f"trace show peaked at {shown.peak_mib:.0f} MiB"
    as_json = run_measured(tmp_path, "trace", "show", "--json", str(path))
    assert as_json.returncode == 0 and as_json.stdout_lines > RECORDS
    assert as_json.peak_mib < STREAM_BOUND_MIB, f"trace show --json peaked at {as_json.peak_mib:.0f} MiB"
    exported = run_measured(tmp_path, "trace", "export", str(path), "--out", str(tmp_path / "ring.json"))
    assert exported.returncode == 0, exported.stderr
    assert f"{RECORDS + 4} events of 1 trace files" in exported.stdout  # 4 metadata events
    assert exported.peak_mib < STREAM_BOUND_MIB, f"trace export peaked at {exported.peak_mib:.0f} MiB"
    with open(tmp_path / "ring.json", "rb") as handle:
        handle.seek(-200, os.SEEK_END)
        assert handle.read().rstrip().endswith(b'"unreadable": []}}')


def test_show_into_a_pipe_closed_early_stops_and_exits_0(tmp_path: Path) -> None:
    path = ring_file(tmp_path / "trace-n1-0-4242", 100_000, records(100_000))  # far more than a pipe holds
    for extra in ([], ["--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "rankscope", "trace", "show", *extra, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        assert proc.wait(timeout=120) == 0
        assert proc.stderr.read() == b""


def test_tail_of_a_huge_sparse_ring_reads_its_newest_records_in_bounded_memory(tmp_path: Path) -> None:
    capacity = 1536 * (1 << 20) // fmt.RECORD_BYTES  # a 1.5 GB ring, holes but for two records
    body = one(1000, 1, fmt.CALL, MAIN) + one(1001, 2, fmt.CALL, MAIN)
    ring_file(tmp_path / "trace-n1-0-4242", capacity, body)
    tail = run_measured(tmp_path, "trace", "tail", str(tmp_path), "-n", "2")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.startswith("[0] train.py:20 wait_for_others  (1 process)"), tail.stdout
    assert tail.peak_mib < BOUND_MIB, f"trace tail peaked at {tail.peak_mib:.0f} MiB"


def test_tail_finds_the_main_thread_far_behind_other_threads_events(tmp_path: Path) -> None:
    # the main thread entered wait_for_others, then a loader thread wrote 300,000 records
    body = one(500, 1, fmt.CALL, MAIN) + one(600, 2, fmt.CALL, MAIN) + records(300_000, thread=OTHER)
    ring_file(tmp_path / "trace-n1-0-4242", 400_000, body)
    tail = run_cli("trace", "tail", str(tmp_path), "-n", "1")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.startswith("[0] train.py:20 wait_for_others  (1 process)"), tail.stdout
    doc = run_cli("trace", "tail", str(tmp_path), "--json").json()
    assert doc["groups"][0]["where"] == "train.py:20 wait_for_others"
    # no start mark and no whole stack in the ring: what came before its oldest record is lost
    (group,) = doc["groups"]
    assert [c["name"] for c in group["stack"]] == ["step", "wait_for_others"] and group["partial"]
    assert group["files"][0]["last"]["name"] == "wait_for_others"


def test_a_version_1_file_is_read_and_a_stack_it_cannot_rebuild_is_partial(tmp_path: Path) -> None:
    """Version 1 writers recorded no whole stacks: a ring that does not begin with the start mark has
    lost the outer calls; one that does (it never wrapped) knows them all."""
    size = fmt.HEADER_SIZE + fmt.DEFAULT_NAMES_BYTES + 100 * fmt.RECORD_BYTES
    calls = one(1000, 1, fmt.CALL, MAIN) + one(1001, 2, fmt.CALL, MAIN)
    start = one(999, 0, fmt.MARK | (fmt.MARK_START << 8), MAIN)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write(tmp_path / "a" / "trace-n1-0-1", header(capacity=100, version=1), names_region(), calls, size=size)
    write(
        tmp_path / "b" / "trace-n1-0-1",
        header(capacity=100, version=1),
        names_region(),
        start + calls,
        size=size,
    )
    for directory, partial in (("a", True), ("b", False)):
        doc = run_cli("trace", "tail", str(tmp_path / directory), "--json").json()
        (group,) = doc["groups"]
        assert group["where"] == "train.py:20 wait_for_others"
        assert [c["name"] for c in group["stack"]] == ["step", "wait_for_others"]
        assert group["partial"] is partial
    text = run_cli("trace", "tail", str(tmp_path / "a")).stdout
    assert "open calls (innermost last; partial: the outer calls were overwritten in the ring):" in text


def test_tail_of_many_files_keeps_only_a_few_events_of_each(tmp_path: Path) -> None:
    # in every file the main thread waits while a loader thread fills the whole decoded window
    body = one(500, 2, fmt.CALL, MAIN) + records(70_000, thread=OTHER)
    for rank in range(10):
        ring_file(tmp_path / f"trace-n1-{rank}-{100 + rank}", 70_002, body, rank)
    tail = run_measured(tmp_path, "trace", "tail", str(tmp_path), "-n", "2")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.startswith("[0-9] train.py:20 wait_for_others  (10 processes)"), tail.stdout
    assert tail.peak_mib < BOUND_MIB, f"trace tail peaked at {tail.peak_mib:.0f} MiB"


def test_a_large_full_mode_file_is_tailed_from_its_end_and_grepped_in_bounded_memory(tmp_path: Path) -> None:
    count = RECORDS
    write(tmp_path / "trace-n1-0-4242", header(capacity=0, ring=False), names_region(), records(count))
    tail = run_measured(tmp_path, "trace", "tail", str(tmp_path), "-n", "3")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.startswith("[0] train.py:10 step (return)"), tail.stdout
    assert tail.peak_mib < BOUND_MIB, f"trace tail peaked at {tail.peak_mib:.0f} MiB"
    grep = run_measured(tmp_path, "trace", "grep", "call .*step", str(tmp_path))
    assert grep.returncode == 0, grep.stderr
    assert f"{count // 2} matches of 'call .*step' in 1 of 1 files" in grep.stdout
    assert grep.peak_mib < STREAM_BOUND_MIB, f"trace grep peaked at {grep.peak_mib:.0f} MiB"


def _hostile_directory(root: Path) -> dict[str, str]:
    """Every kind of bad file under a trace name, with the words its one line must hold."""
    root.mkdir()
    full_ring = fmt.HEADER_SIZE + fmt.DEFAULT_NAMES_BYTES + 16 * fmt.RECORD_BYTES
    nested = b"[" * 1900 + b"]" * 1900
    bad = {
        "trace-n1-1-11": (header(capacity=16, meta=nested), "damaged metadata"),
        "trace-n1-2-12": (header(capacity=16, meta=b'["a list"]'), "damaged metadata"),
        "trace-n1-3-13": (header(capacity=1 << 60), "truncated"),
        "trace-n1-4-14": (header(capacity=16, names_bytes=1 << 40, names_used=1 << 39), "names region"),
        "trace-n1-5-15": (header(capacity=16, names_used=fmt.DEFAULT_NAMES_BYTES + 1), "damaged header"),
        "trace-n1-6-16": (header(capacity=16, meta_len=fmt.META_MAX + 1), "damaged header"),
        "trace-n1-7-17": (header(capacity=16, version=fmt.VERSION + 1), "newer"),
        "trace-n1-8-18": (b"RSTRACE\x00" + bytes(100), "shorter than its 4096-byte header"),
        "trace-n1-9-19": (os.urandom(8192), "no trace header"),
    }
    expected = {}
    for name, (head, words) in bad.items():
        write(root / name, head, size=full_ring if len(head) == fmt.HEADER_SIZE else None)
        expected[name] = words
    # cut short after its header: a ring of 16 records whose file ends inside its names region
    write(root / "trace-n1-10-20", header(capacity=16), NAMES)
    expected["trace-n1-10-20"] = "truncated"
    os.mkfifo(root / "trace-n1-11-21")  # a reader that opened it would wait for a writer forever
    expected["trace-n1-11-21"] = "a FIFO"
    (root / "trace-n1-12-22").symlink_to("/etc/passwd")
    expected["trace-n1-12-22"] = "symbolic link"
    # a link at the bottom of a directory nested deeper than Python's recursion limit
    (deep_directory(root / "deep") / "trace-n1-14-24").symlink_to(root / "deep")
    expected["deep/" + "d/" * DEPTH + "trace-n1-14-24"] = "symbolic link"
    return expected


DEPTH = 1200  # deeper than Python's recursion limit, inside PATH_MAX


def deep_directory(top: Path) -> Path:
    """``top/d/d/.../d``, DEPTH levels: its innermost directory."""
    inner = top
    inner.mkdir()
    for _ in range(DEPTH):
        inner = inner / "d"
        inner.mkdir()
    return inner


def remove_deep_directory(top: Path) -> None:
    """Innermost first (shutil.rmtree, pytest's clean-up, recurses and would fail on it)."""
    inner = top / Path(*["d"] * DEPTH)
    if not top.exists():
        return
    for entry in inner.iterdir():
        entry.unlink()
    while True:
        inner.rmdir()
        if inner == top:
            return
        inner = inner.parent


@pytest.fixture
def root() -> Iterator[Path]:
    """A directory outside pytest's own temporary tree: pytest removes that tree recursively, and a
    deep directory left there by a killed run would break the clean-up of every later run."""
    top = Path(tempfile.mkdtemp(prefix="rankscope-test-deep-"))
    try:
        yield top / "traces"
    finally:
        remove_deep_directory(top / "traces" / "deep")
        shutil.rmtree(top)


def test_hostile_files_are_one_line_each_and_the_good_files_are_read(root: Path) -> None:
    expected = _hostile_directory(root)
    # odd but harmless metadata types: read, with what can be used
    odd = json.dumps({"host": 5, "rank": True, "pid": "x", "thread": 1 << 70, "clock_ns": 10**3000}).encode()
    odd_names = b"9" * 5000 + b"\tx.py\t1\tf\n" + "\u00b2\tx.py\t1\tg\n".encode() + NAMES
    write(
        root / "trace-n1-13-23",
        header(capacity=16, meta=odd, names_used=len(odd_names)),
        names_region(odd_names),
        records(16),
    )
    ring_file(root / "trace-n1-0-4242", 16, records(4))

    tail = run_cli("trace", "tail", str(root), timeout=60)
    assert tail.returncode == 4, tail.stderr  # some files unreadable (docs/exit-codes.md)
    assert tail.stderr == "" and "Traceback" not in tail.stdout
    unreadable = [line for line in tail.stdout.splitlines() if line.startswith("unreadable:")]
    assert len(unreadable) == len(expected)
    for name, words in expected.items():
        (line,) = [u for u in unreadable if f"/traces/{name}: " in u]
        assert words in line, line
    assert tail.stdout.startswith("[0] train.py:10 step (return)")  # the good ring, rank 0
    assert "n1:pid0" not in tail.stdout and "5:pid0" in tail.stdout  # the odd one, its host as written

    grep = run_cli("trace", "grep", "step", str(root), timeout=60)
    assert grep.returncode == 4 and grep.stdout.count("unreadable:") == len(expected)
    assert "trace-n1-0-4242: 4" in grep.stdout

    out = root.parent / "job.json"
    exported = run_cli("trace", "export", str(root), "--out", str(out), timeout=60)
    assert exported.returncode == 4, exported.stderr  # the readable files exported, the others listed
    assert exported.stderr.count("unreadable:") == len(expected) and "Traceback" not in exported.stderr
    doc = json.loads(out.read_text())
    assert len(check_trace_events(doc).process_names) == 2 and len(doc["otherData"]["unreadable"]) == len(
        expected
    )
    out.unlink()
    out.symlink_to(root.parent / "elsewhere")  # a link where the output goes is replaced, not followed
    assert run_cli("trace", "export", str(root), "--out", str(out), timeout=60).returncode == 4
    assert not out.is_symlink() and not (root.parent / "elsewhere").exists()
    missing = run_cli("trace", "export", str(root), "--out", str(root.parent / "no" / "job.json"), timeout=60)
    assert missing.returncode == 8 and len(missing.stderr.strip().splitlines()) == 1

    for name, words in expected.items():
        show = run_cli("trace", "show", str(root / name), timeout=60)
        assert show.returncode == 8, (name, show.stderr)
        assert len(show.stderr.strip().splitlines()) == 1 and words in show.stderr, show.stderr

    (root / "trace-n1-0-4242").unlink()
    (root / "trace-n1-13-23").unlink()
    only_bad = run_cli("trace", "tail", str(root), timeout=60)
    assert only_bad.returncode == 8 and len(only_bad.stderr.strip().splitlines()) == 1
    nothing = run_cli("trace", "export", str(root), "--out", str(out), timeout=60)
    assert nothing.returncode == 8 and len(nothing.stderr.strip().splitlines()) == 1

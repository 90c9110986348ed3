"""Logs as real clusters leave them: a copytruncate hole of NUL bytes, a .gz cut short, a line of
9 MiB, ranks that wrote one file at once without a lock. Each test writes the file the way it
happens and checks what every verb tells the user."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from tests.logs.test_bad_input import TRACEBACK, _one_error_line, _prefixed
from tests.support.cli import run_cli
from tests.support.system import ensure_commands


def _grep(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rankscope", "logs", "grep", *args], capture_output=True, timeout=120
    )


def _body(ranks: int = 4) -> str:
    return "".join(_prefixed(rank, [f"step {rank}", *TRACEBACK]) for rank in range(ranks))


# ----------------------------------------------------------------------------- NUL runs


def test_copytruncate_hole_is_skipped_counted_and_said(tmp_path: Path) -> None:
    """logrotate copytruncate: the job keeps writing at its old offset into a file cut to 0."""
    path = tmp_path / "job.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # no O_APPEND, as most jobs
    old = _prefixed(0, ["before rotation"] * 4000).encode()
    os.write(fd, old)
    os.truncate(path, 0)  # what copytruncate does after copying
    os.write(fd, _body().encode())
    os.close(fd)
    assert path.read_bytes().startswith(b"\0" * len(old))

    note = f"skipped {len(old):,} NUL bytes (a log truncated in place by copytruncate?)"
    errors = run_cli("logs", "errors", str(path))
    assert errors.returncode == 0, errors.stderr
    assert re.search(r"^1 distinct error\(s\) \(1 culprit\) from 4 rank\(s\)", errors.stdout, re.M)
    assert f"note: {note}" in errors.stdout
    data = run_cli("logs", "errors", str(path), "--json").json()
    assert data["read"]["nul_bytes"] == len(old)
    assert note in data["read"]["notes"]
    assert data["lines"] == 20
    ranks = run_cli("logs", "ranks", str(path), "--json").json()
    assert {row["label"]: row["lines"] for row in ranks["ranks"]} == {f"n1:{r}": 5 for r in range(4)}
    assert ranks["unprefixed_lines"] == 0
    grep = _grep("--rank", "n1:0", str(path))
    assert grep.stdout.decode() == "step 0\n" + "\n".join(TRACEBACK) + "\n"
    assert note in grep.stderr.decode()
    split = run_cli("logs", "split", str(path), "--out", str(tmp_path / "out"), "--json").json()
    assert sorted(Path(row["file"]).name for row in split["files"]) == [f"n1_rank{r}.log" for r in range(4)]


def test_a_note_is_said_once_in_the_report_not_again_on_stderr(tmp_path: Path) -> None:
    """One place for what reading met: the report when there is one (its JSON's read.notes with
    --json), stderr only for `grep`, whose stdout is the rank's lines."""
    path = tmp_path / "job.log"
    path.write_bytes(b"\0" * 4096 + _body().encode())
    note = "skipped 4,096 NUL bytes (a log truncated in place by copytruncate?)"
    for verb in (["ranks"], ["errors"], ["split", "--out", str(tmp_path / "split")]):
        text = run_cli("logs", *verb, str(path))
        assert text.returncode == 0 and text.stderr == "", verb
        assert text.stdout.count(note) == 1, verb
        verb = verb[:2] + [str(tmp_path / "split-json")] if verb[0] == "split" else verb
        data = run_cli("logs", *verb, str(path), "--json")
        assert data.stderr == "" and data.json()["read"]["notes"] == [note], verb
    grep = run_cli("logs", "grep", "--rank", "n1:0", str(path))
    assert grep.stdout.splitlines()[0] == "step 0" and note not in grep.stdout
    assert grep.stderr == f"rankscope: note: {note}\n"
    grep_json = run_cli("logs", "grep", "--rank", "n1:0", str(path), "--json")
    assert grep_json.stderr == "" and grep_json.json()["read"]["notes"] == [note]


def test_a_file_of_only_nul_bytes_says_so(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_bytes(b"\0" * 10000)
    result = run_cli("logs", "ranks", str(path))
    assert result.returncode == 3
    assert "only NUL bytes (10,000), no log lines" in _one_error_line(result.stderr)


def _elf() -> bytes:
    return Path(os.path.realpath(sys.executable)).read_bytes()[:65536]


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_elf, id="elf"),
        pytest.param(lambda: random.Random(1).randbytes(1 << 16), id="random"),
        pytest.param(lambda: _body().encode("utf-16"), id="utf-16"),
        pytest.param(lambda: b"\0" * 5000 + random.Random(2).randbytes(1 << 16), id="hole-then-random"),
        pytest.param(lambda: gzip.compress(_elf()), id="gzip-of-elf"),
    ],
)
def test_binary_files_are_still_refused(tmp_path: Path, content: object) -> None:
    assert callable(content)
    path = tmp_path / "job.log"
    path.write_bytes(content())
    for verb in ("errors", "ranks"):
        result = run_cli("logs", verb, str(path))
        assert result.returncode == 8
        assert "binary data, not a text log" in _one_error_line(result.stderr)


# ----------------------------------------------------------------------------- truncated .gz


def _complete_lines(cut: bytes) -> list[str]:
    """What zlib (zcat) recovers from a cut gzip, as whole lines plus the last partial one."""
    text = zlib.decompressobj(wbits=31).decompress(cut).decode()
    return text.splitlines()


@pytest.mark.parametrize("fraction", [0.3, 0.999])
def test_truncated_gzip_is_read_as_far_as_it_goes(tmp_path: Path, fraction: float) -> None:
    rng = random.Random(7)  # varied text: the compressed stream is long enough to cut anywhere
    lines = [f"[n1:{rank}]:step {n} loss {rng.random():.6f}" for n in range(3000) for rank in range(4)]
    lines += [f"[n1:{rank}]:{line}" for rank in range(4) for line in TRACEBACK]
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "job.log.gz"
    path.write_bytes(data[: int(len(data) * fraction)])
    recovered = _complete_lines(path.read_bytes())
    assert 0 < len(recovered) < len(lines)
    text_bytes = len("\n".join(recovered).encode()) + (1 if recovered else 0)
    note = f"{path} is truncated after "
    expected: dict[str, int] = {}
    for line in recovered:
        label = line[1 : line.index("]")]
        expected[label] = expected.get(label, 0) + 1

    ranks = run_cli("logs", "ranks", str(path), "--json")
    assert ranks.returncode == 0, ranks.stderr
    doc = ranks.json()
    assert {row["label"]: row["lines"] for row in doc["ranks"]} == expected
    [said] = [n for n in doc["read"]["notes"] if n.startswith(note)]
    assert said.endswith("bytes of text; read what was there")
    assert int(said[len(note) :].split()[0].replace(",", "")) in (text_bytes, text_bytes - 1)

    errors = run_cli("logs", "errors", str(path))
    assert errors.returncode == 0 and note in errors.stdout
    grep = _grep("--rank", "n1:2", str(path))
    assert grep.returncode == 0 and note in grep.stderr.decode()
    assert grep.stdout.decode().splitlines() == [
        line[len("[n1:2]:") :] for line in recovered if line.startswith("[n1:2]:")
    ]
    split = run_cli("logs", "split", str(path), "--out", str(tmp_path / "out"), "--json")
    assert split.returncode == 0
    assert {row["label"]: row["lines"] for row in split.json()["files"]} == expected


def test_gzip_cut_inside_its_header_says_why_nothing_was_read(tmp_path: Path) -> None:
    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress(_body().encode())[:6])
    result = run_cli("logs", "errors", str(path))
    assert result.returncode == 3
    assert "job.log.gz is truncated after 0 bytes of text" in _one_error_line(result.stderr)


def test_concatenated_and_stdin_gzip_members_are_all_read(tmp_path: Path) -> None:
    """``cat a.gz b.gz`` is a valid gzip stream of two members (logrotate's delaycompress merges)."""
    first, second = _body(2), _body(4)[len(_body(2)) :]
    data = gzip.compress(first.encode()) + gzip.compress(second.encode())
    path = tmp_path / "job.log.gz"
    path.write_bytes(data)
    doc = run_cli("logs", "ranks", str(path), "--json").json()
    assert [row["lines"] for row in doc["ranks"]] == [5, 5, 5, 5]
    assert doc["read"]["notes"] == []
    piped = subprocess.run(
        [sys.executable, "-m", "rankscope", "logs", "ranks", "-", "--json"],
        input=data,
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0
    assert "4 rank" not in piped.stdout.decode()  # JSON, not the table
    assert [row["lines"] for row in __import__("json").loads(piped.stdout)["ranks"]] == [5, 5, 5, 5]


# ----------------------------------------------------------------------------- long lines


def test_a_nine_mib_line_keeps_its_rank_in_every_piece(tmp_path: Path) -> None:
    long_text = ("".join(f"{n:08d} " for n in range(1 << 20)))[: 9 << 20] + "END"
    path = tmp_path / "job.log"
    path.write_text(_prefixed(0, ["before"]) + f"[n1:1]:{long_text}\n" + _body(3))

    ranks = run_cli("logs", "ranks", str(path), "--json").json()
    assert {row["label"]: row["lines"] for row in ranks["ranks"]} == {"n1:0": 6, "n1:1": 6, "n1:2": 5}
    assert ranks["lines"] == 17 and ranks["unprefixed_lines"] == 0
    assert ranks["read"]["cut_long_lines"] == 1
    text = run_cli("logs", "ranks", str(path)).stdout
    assert (
        "note: 1 line(s) longer than 4 MiB were cut into pieces (3 in all), each kept with its line's rank"
        in text
    )

    grep = _grep("--rank", "n1:1", str(path))
    assert grep.stdout.decode() == long_text + "\nstep 1\n" + "\n".join(TRACEBACK) + "\n"
    kept = _grep("--rank", "n1:1", "--keep-prefix", str(path))
    assert kept.stdout.decode().splitlines()[0] == f"[n1:1]:{long_text}"

    out = tmp_path / "out"
    split = run_cli("logs", "split", str(path), "--out", str(out), "--json").json()
    assert {row["label"]: row["lines"] for row in split["files"]} == {"n1:0": 6, "n1:1": 6, "n1:2": 5}
    assert not (out / "unprefixed.log").exists()
    assert (out / "n1_rank1.log").read_text().splitlines()[0] == long_text

    errors = run_cli("logs", "errors", str(path), "--json").json()
    assert errors["lines"] == 17
    firsts = {(g["first"]["label"], g["first"]["line"]) for g in errors["groups"]}
    assert firsts == {("n1:0", 4)}  # line numbers count the long line once
    assert [g["ranks"] for g in errors["groups"]] == ["n1:[0-2]"]


# ----------------------------------------------------------------------------- interleaved writes

WRITER = r"""
import os, sys, time
path, rank, lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
while not os.path.exists(path + ".go"):
    time.sleep(0.001)
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
prefix = f"[node{rank // 4:03d}:{rank}]:"
def say(text):  # print() on an unbuffered stream: the text, then the newline, in two writes
    os.write(fd, (prefix + text).encode())
    os.write(fd, b"\n")
for n in range(lines):
    say(f"2024-05-01 10:00:{n % 60:02d} INFO step {n} loss 2.5 rank {rank}")
for line in ["Traceback (most recent call last):", '  File "/w/train.py", line 412, in <module>',
             "    main(cfg)"]:
    say(line)
say("FloatingPointError: loss is nan" if rank == 5 else f"RuntimeError: NCCL aborted on rank {rank}")
"""


def test_ranks_writing_one_file_at_once_are_told_apart(tmp_path: Path) -> None:
    """Real processes, one O_APPEND file, each print as two writes: lines of several ranks."""
    writers, lines = 12, 2500
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path = tmp_path / "job.log"
    procs = [
        subprocess.Popen([sys.executable, str(script), str(path), str(rank), str(lines)])
        for rank in range(writers)
    ]
    (tmp_path / "job.log.go").touch()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    physical = path.read_bytes().split(b"\n")
    mixed = sum(1 for line in physical if line.count(b"]:") > 1)
    assert mixed > 0, "the writers never interleaved: nothing was tested"

    doc = run_cli("logs", "ranks", str(path), "--json").json()
    per_rank = lines + 4
    assert {row["label"]: row["lines"] for row in doc["ranks"]} == {
        f"node{rank // 4:03d}:{rank}": per_rank for rank in range(writers)
    }
    assert doc["unprefixed_lines"] == 0
    assert doc["read"]["interleaved_lines"] == mixed

    errors = run_cli("logs", "errors", str(path), "--json").json()
    groups = sorted((g["exception_type"], sorted(g["labels"])) for g in errors["groups"])
    assert groups == [
        ("FloatingPointError", ["node001:5"]),
        ("RuntimeError", sorted(f"node{r // 4:03d}:{r}" for r in range(writers) if r != 5)),
    ]
    text = run_cli("logs", "errors", str(path)).stdout
    assert re.search(r"^2 distinct error\(s\) \([^)]*\) from 12 rank\(s\)", text, re.M), text
    assert f"note: repaired {mixed:,} line(s) that held the text of several ranks" in text

    out = tmp_path / "per-rank"
    split = run_cli("logs", "split", str(path), "--out", str(out), "--json").json()
    assert {row["label"]: row["lines"] for row in split["files"]} == {
        f"node{rank // 4:03d}:{rank}": per_rank for rank in range(writers)
    }
    assert not (out / "unprefixed.log").exists()

    grep = _grep("--rank", "node000:3", str(path)).stdout.decode().splitlines()
    assert grep[:lines] == [
        f"2024-05-01 10:00:{n % 60:02d} INFO step {n} loss 2.5 rank 3" for n in range(lines)
    ]
    assert grep[-1] == "RuntimeError: NCCL aborted on rank 3"
    assert len(grep) == per_rank
    assert (out / "node000_rank3.log").read_text().splitlines() == grep


def test_interleaving_is_cut_only_at_markers_of_the_lines_own_family(tmp_path: Path) -> None:
    log = b"".join(
        [
            b"[rank0]: hello from 0[rank1]: hello from 1\n",
            b"\n",  # rank 1's newline, late: dropped
            b"[rank2]: ok[rank3]: ok[rank1]: again\n",
            b"[rank0]: quoting [rank3]: (a marker of the line's own family) cuts there too\n",
            b"\n",
            b"\n",
            b"[default0]:[rank0]: Traceback (most recent call last):\n",  # torch's nested marker: kept
            b"[default0]:INFO [trainer.py:45] step 3 [default]: [1] done\n",  # other families: text
            b"[node1:3] rankscope prefix form[node1:4] second\n",
            b"\n",
        ]
    )
    path = tmp_path / "job.log"
    path.write_bytes(log)
    doc = run_cli("logs", "ranks", str(path), "--json").json()
    assert {row["label"]: row["lines"] for row in doc["ranks"]} == {
        "0": 4,  # [rank0] x2 and [default0] x2 all read as rank 0
        "1": 2,
        "2": 1,
        "3": 2,
        "node1:3": 1,
        "node1:4": 1,
    }
    assert doc["unprefixed_lines"] == 0
    assert doc["read"]["interleaved_lines"] == 4
    assert _grep("--rank", "1", str(path)).stdout == b"hello from 1\nagain\n"
    assert _grep("--rank", "node1:4", str(path)).stdout == b"second\n"
    default0 = _grep("--rank", "0", str(path)).stdout.decode().splitlines()
    assert default0[-1] == "INFO [trainer.py:45] step 3 [default]: [1] done"
    assert "Traceback (most recent call last):" in default0


# ----------------------------------------------------------------------------- bounded memory


def _messy_peak_kib(tmp_path: Path, size: int) -> int:
    """Peak RSS of `logs ranks` over four messy logs of ``size`` bytes each, its counts checked."""
    hole = tmp_path / f"hole-{size}.log"
    with open(hole, "wb") as out:
        out.truncate(size)  # a sparse hole, as copytruncate leaves
        out.seek(size)
        out.write(b"[n1:0]:after the hole\n")
    long = tmp_path / f"long-{size}.log"
    long.write_bytes(b"[n1:1]:" + b"y" * size)
    ompi = tmp_path / f"ompi-{size}.log"
    fragment = b"[1,0]<stdout>:" + b"z" * 1024 + b"[1,1]<stdout>:tick\n"
    ompi.write_bytes(fragment * (size // len(fragment)))
    mixed = tmp_path / f"mixed-{size}.log"
    mixed.write_bytes(b"[rank0]: a step of rank 0[rank1]: a step of rank 1\n\n" * (size // 52))
    stats = tmp_path / f"time-{size}.txt"
    argv = [
        sys.executable,
        "-m",
        "rankscope",
        "logs",
        "ranks",
        "--json",
        *map(str, (hole, long, ompi, mixed)),
    ]
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", str(stats), *argv], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    lines = {row["label"]: row["lines"] for row in doc["ranks"]}
    assert lines["n1:0"] == 1 and lines["n1:1"] == 1
    assert lines["0"] > 12 and lines["1"] == size // len(fragment) + size // 52
    assert doc["read"]["nul_bytes"] == size
    return int(stats.read_text().split()[-1])


@pytest.mark.slow
@pytest.mark.needs("time")
@pytest.mark.timeout(300)
def test_memory_stays_bounded_on_messy_input(tmp_path: Path) -> None:
    """NULs, a line without a newline (longer than the 4 MiB a line is cut at), an Open MPI rank
    whose fragments never end a physical line, interleaved lines: none of it is held whole. Three
    times the input (18 MiB of each instead of 6) takes less than 8 MiB more (about 5-6 MiB here, the
    interpreter's own growth): holding any one of the larger inputs whole would take 12 MiB more at
    least."""
    ensure_commands({"time": "time"})
    small = _messy_peak_kib(tmp_path, 6 << 20)
    large = _messy_peak_kib(tmp_path, 18 << 20)
    assert large - small < 8 * 1024, f"peak RSS {small} KiB with 6 MiB of each, {large} KiB with 18 MiB"
    assert large < 128 * 1024, f"peak RSS {large} KiB"

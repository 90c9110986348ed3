"""Bad input: each case ends in one clear stderr line and a documented exit code, or in a
report that counts what it could not use. Nothing crashes, nothing is silently dropped."""

from __future__ import annotations

import gzip
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.cli import run_cli

from rankscope.logs.demux import label_of_file_name, safe_file_name

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/w/train.py", line 3, in <module>',
    "    main()",
    "ZeroDivisionError: division by zero",
]


def _prefixed(rank: int, lines: list[str]) -> str:
    return "".join(f"[n1:{rank}]:{line}\n" for line in lines)


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rankscope: error: ")
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("verb", ["errors", "ranks", "nccl"])
def test_binary_garbage_is_bad_input(tmp_path: Path, verb: str) -> None:
    path = tmp_path / "core.bin"
    path.write_bytes(bytes(range(256)) * 100)
    result = run_cli("logs", verb, str(path))
    assert result.returncode == 8
    assert "binary data, not a text log" in _one_error_line(result.stderr)


def test_empty_file_is_nothing_found(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    result = run_cli("logs", "errors", str(path))
    assert result.returncode == 3
    assert "empty, no log lines" in _one_error_line(result.stderr)


def test_directory_without_logs(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"x")
    result = run_cli("logs", "errors", str(tmp_path))
    assert result.returncode == 3
    assert f"no log files under {tmp_path}" in _one_error_line(result.stderr)


def test_missing_path_is_bad_input(tmp_path: Path) -> None:
    result = run_cli("logs", "ranks", str(tmp_path / "nope.log"))
    assert result.returncode == 8
    assert "does not exist" in _one_error_line(result.stderr)


def test_gzip_and_stdin_are_read(tmp_path: Path) -> None:
    text = _prefixed(0, TRACEBACK) + _prefixed(1, TRACEBACK)
    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    for args, stdin in (((str(path),), ""), (("-",), text)):
        data = run_cli("logs", "errors", *args, "--json", input=stdin).json()
        assert [(g["exception_type"], g["ranks"]) for g in data["groups"]] == [
            ("ZeroDivisionError", "n1:[0-1]")
        ]


def test_invalid_utf8_ansi_crlf_and_huge_lines(tmp_path: Path) -> None:
    body = (
        b"[n1:0]:\x1b[32mINFO\x1b[0m step 1 \xff\xfe bad bytes\r\n"
        + b"[n1:1]:"
        + b"x" * (5 << 20)
        + b"\r\n"  # one line of 5 MiB
        + b"".join(f"[n1:{r}]:{line}\r\n".encode() for r in (0, 1) for line in TRACEBACK)
        + b"[n1:2]:Traceback (most recent call last):\r\n"
        + b'[n1:2]:  File "/w/train.py", line 3, in <module>\r\n'  # the log ends mid-traceback
    )
    path = tmp_path / "messy.log"
    path.write_bytes(body)
    data = run_cli("logs", "errors", str(path), "--json").json()
    groups = [(g["exception_type"], g["ranks"], g["truncated"]) for g in data["groups"]]
    assert groups == [("ZeroDivisionError", "n1:[0-1]", False), ("<no exception line>", "n1:2", True)]
    assert data["groups"][0]["message"] == "division by zero"  # no trailing CR
    assert data["truncated_tracebacks"] == 1
    assert data["read"]["cut_long_lines"] == 1
    text = run_cli("logs", "errors", str(path)).stdout
    assert "note: 1 traceback(s) had no exception line" in text
    assert "note: 1 line(s) longer than 4 MiB were cut into pieces" in text
    # grep keeps the bytes as they were (like grep), minus the prefix, colour codes and CR
    grep = subprocess.run(
        [sys.executable, "-m", "rankscope", "logs", "grep", "--rank", "n1:0", str(path)],
        capture_output=True,
        timeout=60,
    )
    assert grep.stdout.splitlines()[0] == b"INFO step 1 \xff\xfe bad bytes"


def test_unprefixed_log_groups_and_names_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("\n".join(TRACEBACK * 3 + ["some other line"]) + "\n")
    result = run_cli("logs", "errors", str(path))
    assert result.returncode == 0
    assert "error 1 of 1 — culprit, the root cause, 1 rank(s): -  (3 tracebacks)" in result.stdout
    assert "torchrun --role $(hostname -s): --tee 3" in result.stdout
    ranks = run_cli("logs", "ranks", str(path))
    assert "(no rank prefix)" in ranks.stdout and "13 lines" in ranks.stdout


def test_grep_for_absent_rank_says_how_to_list_ranks(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(_prefixed(0, TRACEBACK))
    result = run_cli("logs", "grep", "--rank", "n9:7", str(path))
    assert result.returncode == 3
    assert "rankscope logs ranks" in _one_error_line(result.stderr)


def test_split_refuses_a_file_as_out_dir(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(_prefixed(0, TRACEBACK))
    result = run_cli("logs", "split", str(path), "--out", str(path))
    assert result.returncode == 8
    _one_error_line(result.stderr)
    assert os.path.isfile(path)


def test_unprefixed_interleaving_without_headers_still_counts_the_errors(tmp_path: Path) -> None:
    """Four ranks crashed at once with no prefixes; the log kept only frames and exception lines."""
    frame = '  File "/srv/job/loader.py", line 41, in next_batch'
    code = "    return self.queue.get(timeout=self.timeout)"
    lines = [frame, frame, code, "queue.Empty", code, frame, "TimeoutError: worker 3 gave no batch in 300 s"]
    lines += [
        code,
        "TimeoutError: worker 1 gave no batch in 300 s",
        "TimeoutError: worker 0 gave no batch in 300 s",
    ]
    path = tmp_path / "console.log"
    path.write_text("\n".join(lines) + "\n")
    result = run_cli("logs", "errors", str(path))
    assert result.returncode == 0
    assert "     3x  TimeoutError: worker <n> gave no batch in <n> s" in result.stdout
    assert "torchrun --role $(hostname -s): --tee 3" in result.stdout
    data = run_cli("logs", "errors", str(path), "--json").json()
    assert data["unprefixed_exception_lines"] == [
        {"exception": "TimeoutError: worker <n> gave no batch in <n> s", "count": 3}
    ]


def test_split_never_writes_through_a_link_planted_in_out_dir(tmp_path: Path) -> None:
    """A shared --out directory where someone planted DIR/vm_rank1.log -> ../victim.txt."""
    path = tmp_path / "job.log"
    path.write_text("".join(f"[vm:{rank}]:{line}\n" for rank in (0, 1) for line in TRACEBACK))
    out = tmp_path / "per-rank"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "vm_rank1.log").symlink_to("../victim.txt")
    refused = run_cli("logs", "split", str(path), "--out", str(out))
    assert refused.returncode == 8
    assert "is not empty" in _one_error_line(refused.stderr) and "--force" in refused.stderr
    result = run_cli("logs", "split", str(path), "--out", str(out), "--force")
    assert result.returncode == 8
    line = _one_error_line(result.stderr)
    assert f"cannot write {out / 'vm_rank1.log'}: it is a symbolic link" in line
    assert victim.read_text() == "precious\n"
    assert (out / "vm_rank1.log").is_symlink()


def test_split_force_replaces_an_old_file_with_a_private_new_one(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(_prefixed(0, TRACEBACK))
    out = tmp_path / "per-rank"
    out.mkdir()
    out.chmod(0o1777)
    old = out / "n1_rank0.log"
    old.write_text("an older and much longer run of lines\n" * 10)
    old.chmod(0o666)
    assert run_cli("logs", "split", str(path), "--out", str(out), "--force").returncode == 0
    assert old.read_text() == "\n".join(TRACEBACK) + "\n"
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o1777  # not rankscope's: left as it was


def test_split_gives_every_label_its_own_file(tmp_path: Path) -> None:
    """``a/b:0`` and ``a_b:0`` once shared ``a_b_rank0.log`` and one rank's lines were lost."""
    path = tmp_path / "job.log"
    labels = ["a/b:0", "a_b:0", "a%2Fb:0", "x_rank:3"]
    path.write_text("".join(f"[{label}]: line {n} of {label}\n" for n in range(3) for label in labels))
    data = run_cli("logs", "split", str(path), "--out", str(tmp_path / "out"), "--json").json()
    by_label = {row["label"]: row for row in data["files"]}
    assert set(by_label) == set(labels)
    assert len({row["file"] for row in data["files"]}) == len(labels)
    for label, row in by_label.items():
        assert row["lines"] == 3
        assert Path(row["file"]).read_text() == "".join(f" line {n} of {label}\n" for n in range(3))
        assert label_of_file_name(Path(row["file"]).name) == label.encode()


@given(st.one_of(st.none(), st.binary(max_size=40)))
def test_split_file_names_are_safe_and_reversible(label: Optional[bytes]) -> None:
    name = safe_file_name(label)
    assert "/" not in name and "\0" not in name and name not in (".", "..")
    assert label_of_file_name(name) == label


def _lower_open_files(limit: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


def test_split_keeps_open_files_bounded_under_a_low_ulimit(tmp_path: Path) -> None:
    """2,000 ranks, each writing twice, split under ``ulimit -n 256``: once 'Too many open files'."""
    ranks = 2000
    path = tmp_path / "job.log"
    path.write_text("".join(f"[n1:{rank}]:pass {n}\n" for n in range(2) for rank in range(ranks)))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "rankscope", "logs", "split", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_lower_open_files(256),
    )
    assert proc.returncode == 0, proc.stderr
    assert len(list(out.iterdir())) == ranks
    for rank in (0, 1023, ranks - 1):
        assert (out / f"n1_rank{rank}.log").read_text() == "pass 0\npass 1\n"


def test_json_that_ends_in_an_error_is_still_one_document(tmp_path: Path) -> None:
    # A path that is not there: reading never started, `read` is null.
    missing = run_cli("logs", "grep", "--rank", "3", str(tmp_path / "gone.log"), "--json")
    document = missing.json()
    assert document["schema"] == "rankscope.logs.grep/1" and document["read"] is None
    assert set(document["error"]) == {"message", "hint", "exit_code"}
    assert document["error"]["exit_code"] == missing.returncode != 0
    assert "gone.log" in document["error"]["message"]
    # Read, and nothing in it: the verb's own document with the error and what was read.
    log = tmp_path / "job.log"
    log.write_text("[n1:0] hello\n")
    quiet = run_cli("logs", "nccl", str(log), "--json")
    document = quiet.json()
    assert document["schema"] == "rankscope.logs.nccl/1" and document["read"]["sources"] == [str(log)]
    assert document["error"]["exit_code"] == quiet.returncode == 3
    assert document["error"]["hint"].startswith("run the job with NCCL_DEBUG=INFO")


@pytest.mark.parametrize("verb", [["logs", "grep", "--rank", "3"], ["logs", "grep", "--rank", "3", "--json"]])
def test_a_reader_that_stops_early_ends_the_verb_quietly_with_0(tmp_path: Path, verb: list[str]) -> None:
    """`rankscope logs grep --rank 3 big.log | head -1`: the closed pipe is no failure (exit 0, nothing on
    stderr), as for every verb; click's own ending of a closed pipe (exit 1, "a bug") is not used."""
    log = tmp_path / "big.log"
    log.write_text(
        "".join(f"[rank{i % 8}]: step {i} loss 1.0\n" for i in range(200_000))
    )  # more than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankscope", *verb, str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read() == b""

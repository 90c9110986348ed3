"""printflock, Tee and prefix_output in real processes (forked, threaded, launched)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rankscope.logs.prefixes import split_line


def _python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


@pytest.mark.timeout(120)
def test_printflock_lines_never_interleave(tmp_path: Path) -> None:
    """4 processes x 4 threads write lines longer than a stdio buffer (several writes each) to one file."""
    out = tmp_path / "shared.log"
    code = f"""
        import os, sys, threading
        from rankscope.inproc import printflock
        sink = open({str(out)!r}, "a", buffering=1)
        def work(tag):
            for i in range(50):
                printflock(tag + ":" + str(i) + ":" + tag * 20000, file=sink)
        pids = []
        for p in range(4):
            pid = os.fork()
            if pid == 0:
                threads = [threading.Thread(target=work, args=(chr(65 + p * 4 + t),)) for t in range(4)]
                [t.start() for t in threads]; [t.join() for t in threads]
                sink.flush(); os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
    """
    result = _python(code, {"RANKSCOPE_PRINTFLOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 4 * 4 * 50
    for line in lines:
        tag, _, rest = line.partition(":")
        assert rest.split(":", 1)[1] == tag * 20000, line[:80]


def test_tee_copies_stdout_to_private_per_rank_file(tmp_path: Path) -> None:
    code = f"""
        from rankscope.inproc import Tee
        with Tee({str(tmp_path)!r} + "/out/rank{{rank}}.log"):
            print("hello from the rank")
        print("after close")
    """
    result = _python(code, {"RANK": "5"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hello from the rank", "after close"]
    path = tmp_path / "out" / "rank5.log"
    assert path.read_text() == "hello from the rank\n"
    assert path.stat().st_mode & 0o777 == 0o600


def test_tee_never_writes_through_a_symbolic_link_and_the_job_goes_on(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "rank5.log").symlink_to(victim)
    code = f"""
        from rankscope.inproc import Tee
        with Tee({str(tmp_path)!r} + "/rank{{rank}}.log"):
            print("step 1")
        print("training finished")
    """
    result = _python(code, {"RANK": "5"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["step 1", "training finished"]
    assert victim.read_text() == "precious\n"
    assert "not copying output to" in result.stderr and "symbolic link" in result.stderr


def test_tee_creates_missing_directories_private(tmp_path: Path) -> None:
    code = f"""
        from rankscope.inproc import Tee
        with Tee({str(tmp_path)!r} + "/a/b/rank.log"):
            print("x")
    """
    result = _python(code, {"RANK": "0"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700


def test_tee_on_a_full_disk_never_raises_into_the_job() -> None:
    """/dev/full: every write fails with ENOSPC, as a real full disk does."""
    code = """
        from rankscope.inproc import Tee
        with Tee("/dev/full"):
            for step in range(3):
                print("step", step)
        print("training finished")
    """
    result = _python(code, {"RANK": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["step 0", "step 1", "step 2", "training finished"]
    [warning] = result.stderr.splitlines()
    assert warning.startswith("rankscope Tee: stopped copying to /dev/full: ")
    assert "No space left on device" in warning


def test_prefix_output_covers_print_logging_and_tracebacks() -> None:
    code = """
        import logging
        logging.basicConfig(level=logging.INFO)  # handler made before prefixing: must be redirected
        from rankscope.inproc import prefix_output
        prefix_output()
        print("a print")
        logging.getLogger("train").info("a log record")
        raise ValueError("boom")
    """
    result = _python(code, {"RANK": "6", "SLURMD_NODENAME": "gpu017"})
    assert result.returncode == 1
    assert result.stdout == "[gpu017:6] a print\n"
    err = result.stderr.splitlines()
    assert err[0] == "[gpu017:6] INFO:train:a log record"
    assert all(line.startswith("[gpu017:6] ") for line in err), err
    assert err[-1] == "[gpu017:6] ValueError: boom"
    assert split_line(err[-1].encode()).label == b"gpu017:6"


def test_prefix_output_short_host() -> None:
    code = "from rankscope.inproc import prefix_output; prefix_output(short_host=True); print('x')"
    result = _python(code, {"RANK": "2", "SLURMD_NODENAME": "node-017"})
    assert result.stdout == "[017:2] x\n"


def test_tee_with_threads_and_fork_keeps_every_line_whole(tmp_path: Path) -> None:
    code = f"""
        import os, threading
        from rankscope.inproc import Tee
        tee = Tee({str(tmp_path)!r} + "/rank{{rank}}.log")
        def work(tag):
            for i in range(200):
                print(tag * 300, i)
        threads = [threading.Thread(target=work, args=(c,)) for c in "ABCD"]
        [t.start() for t in threads]; [t.join() for t in threads]
        pid = os.fork()
        if pid == 0:
            work("E"); os._exit(0)
        os.waitpid(pid, 0)
        tee.close()
    """
    result = _python(code, {"RANK": "1"})
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "rank1.log").read_text().splitlines()
    assert len(lines) == 5 * 200
    for line in lines:
        body, number = line.split(" ")
        assert len(set(body)) == 1 and len(body) == 300 and 0 <= int(number) < 200, line[:60]


def test_prefix_output_writes_a_line_without_end_in_pieces() -> None:
    from rankscope.inproc.prefixing import PIECE
    from rankscope.passthrough import PIECE as VERB_PIECE

    assert PIECE == VERB_PIECE
    code = textwrap.dedent(
        """
        import sys
        from rankscope.inproc import prefix_output
        prefix_output(label="n:1")
        for _ in range(9):
            sys.stdout.write("x" * (1 << 20))
        print("!")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert all(line.startswith("[n:1] ") for line in lines)
    assert [len(line) - len("[n:1] ") for line in lines] == [PIECE, PIECE, (9 << 20) - 2 * PIECE + 1]

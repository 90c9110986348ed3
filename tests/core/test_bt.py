"""`rankscope core bt` on real cores: a segfault in a worker thread, gcore of a hung process, one core per rank."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.core.conftest import TERMINATE, Crashes, real_python
from tests.support.cli import run_cli

from rankscope.core.notes import NotACoreError, read_notes

pytestmark = pytest.mark.needs("gdb")


def test_notes_name_pid_signal_crashing_thread_executable_and_rank(crashes: Crashes) -> None:
    core = crashes.crash(rank=5)
    notes = read_notes(str(core))
    assert notes.pid == int(core.name.split(".")[1])
    assert notes.signal_name == "SIGSEGV"
    assert len(notes.threads) == 2 and notes.crashing_thread != notes.pid  # the worker thread got it
    assert notes.executable == real_python()
    assert notes.env["RANK"] == "5"
    assert not notes.truncated


def test_bt_of_a_segfault_in_a_worker_thread(crashes: Crashes, tmp_path: Path) -> None:
    core = crashes.crash()
    out = tmp_path / "report"
    result = run_cli("core", "bt", str(core), "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = result.stdout
    notes = read_notes(str(core))
    assert f"SIGSEGV in thread {notes.crashing_thread} of pid {notes.pid}" in summary
    assert "string_at" in summary  # the ctypes frame, native and Python
    assert "_ctypes" in summary and "called from _ctypes" in summary  # the extension that did it
    assert "crash_in_worker" in summary  # pystack's Python frame of the crashing thread
    # the full text keeps every thread for a bug report
    full = (out / f"{core.name}.txt").read_text()
    assert "thread apply all bt" not in full and full.count("Thread ") >= 2
    assert "=== pystack" in full


def test_bt_json(crashes: Crashes) -> None:
    core = crashes.crash()
    result = run_cli("core", "bt", str(core), "--json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert document["schema"] == "rankscope.core.bt/1"
    example = document["groups"][0]["example"]
    assert example["notes"]["signal"] == 11
    assert any(f["function"] == "crash_in_worker" for f in example["python"])
    assert example["native"][0]["function"]  # innermost native frame named


def test_cores_of_the_same_crash_on_several_ranks_are_grouped(crashes: Crashes) -> None:
    cores = [crashes.crash(rank=rank) for rank in (0, 1, 2)]
    result = run_cli("core", "bt", *map(str, cores))
    assert result.returncode == 0, result.stderr
    assert "the same crash on ranks 0-2 (3 cores)" in result.stdout
    assert result.stdout.count("SIGSEGV in thread") == 1


def test_truncated_and_garbage_files_are_one_line_each_and_the_real_core_is_still_read(
    crashes: Crashes, tmp_path: Path
) -> None:
    core = crashes.crash()
    truncated = tmp_path / "core.truncated"
    truncated.write_bytes(core.read_bytes()[:3000])
    garbage = tmp_path / "core.garbage"
    garbage.write_bytes(b"this is not a core file\n" * 10)
    for bad in (truncated, garbage):
        with pytest.raises(NotACoreError):
            read_notes(str(bad))
    result = run_cli("core", "bt", str(truncated), str(core), str(garbage))
    assert result.returncode == 8
    assert "SIGSEGV in thread" in result.stdout
    assert f"not a readable core: {truncated}: truncated" in result.stdout
    assert f"not a readable core: {garbage}: not an ELF file" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_fifo_planted_as_a_core_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "core.1234"
    os.mkfifo(fifo)  # nobody ever writes it: an open() that blocks would never return
    result = run_cli("core", "bt", str(fifo), timeout=60)
    assert result.returncode == 8, result.stdout + result.stderr
    assert f"not a readable core: {fifo}: not a regular file (a FIFO)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_bt_of_a_gcore_of_a_hung_process(hung: subprocess.Popen[bytes], tmp_path: Path) -> None:
    prefix = tmp_path / "gcore"
    subprocess.run(["gcore", "-o", str(prefix), str(hung.pid)], check=True, capture_output=True, timeout=120)
    core = Path(f"{prefix}.{hung.pid}")
    try:
        result = run_cli("core", "bt", str(core))
        assert result.returncode == 0, result.stderr
        assert f"a live process (gcore), pid {hung.pid}" in result.stdout and "not a crash" in result.stdout
        assert "hang_here" in result.stdout  # its Python frame, via pystack
        assert "clock_nanosleep" in result.stdout or "sleep" in result.stdout
    finally:
        core.unlink(missing_ok=True)


def test_a_different_python_is_named(crashes: Crashes, tmp_path: Path) -> None:
    core = crashes.crash()
    other = tmp_path / "python-other"
    other.symlink_to("/bin/true")
    result = run_cli("core", "bt", str(core), "--python", str(other))
    assert f"the core was written by {real_python()}; gdb reads it with {other}" in result.stdout


def test_std_terminate_on_a_worker_thread_is_explained(crashes: Crashes) -> None:
    core = crashes.crash(source=TERMINATE, expect=signal.SIGABRT)
    result = run_cli("core", "bt", str(core))
    assert result.returncode == 0, result.stderr
    assert "SIGABRT in thread" in result.stdout
    assert "meaning: std::terminate: a C++ exception" in result.stdout
    assert "worker" in result.stdout  # its Python frame


def test_abort_called_from_python(crashes: Crashes) -> None:
    core = crashes.crash(source="import os\nos.abort()\n", expect=signal.SIGABRT)
    result = run_cli("core", "bt", str(core))
    assert "meaning: the process called abort()" in result.stdout


def test_without_gdb_one_line_and_exit_6(tmp_path: Path) -> None:
    import os
    import sys

    core = tmp_path / "core.1"
    core.write_bytes(b"\x7fELF")
    result = run_cli("core", "bt", str(core), env={**os.environ, "PATH": os.path.dirname(sys.executable)})
    assert result.returncode == 6
    assert "gdb not found on PATH" in result.stderr and "Traceback" not in result.stderr


def test_without_pystack_one_line_says_what_to_install(crashes: Crashes, tmp_path: Path) -> None:
    """pystack hidden: an interpreter of the same venv in a directory without pystack, PATH with gdb only."""
    import shutil
    import sys

    venv = Path(sys.prefix)
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (bare / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (bare / "lib").symlink_to(venv / "lib")
    tools = tmp_path / "tools"
    tools.mkdir()
    gdb = shutil.which("gdb")
    assert gdb is not None
    (tools / "gdb").symlink_to(gdb)
    core = crashes.crash()
    result = subprocess.run(
        [str(bare / "bin" / "python"), "-m", "rankscope", "core", "bt", str(core)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tools)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    install = [line for line in lines if "pip install pystack" in line]
    assert len(install) == 1 and "rankscope[pystack]" in install[0], result.stdout
    # right under the meaning, not after the frames
    meaning = next(i for i, line in enumerate(lines) if "meaning:" in line)
    assert lines.index(install[0]) == meaning + 1
    assert "Python frames (innermost first)" not in result.stdout

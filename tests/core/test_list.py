"""`rankscope core list` finds real cores by their headers and describes them from their own notes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.core.conftest import Crashes
from tests.support.cli import run_cli


def test_list_finds_the_core_where_core_pattern_sent_it(crashes: Crashes, tmp_path: Path) -> None:
    core = crashes.crash(rank=4)
    (tmp_path / "core.notes.txt").write_text("not a core, despite its name\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # no DIR: the core_pattern's directory is searched even from another working directory
    proc = subprocess.run(
        [sys.executable, "-m", "rankscope", "core", "list", "--json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr
    import json

    document = json.loads(proc.stdout)
    assert str(tmp_path) in document["places"]
    found = [c for c in document["cores"] if c["path"] == str(core)]
    assert len(found) == 1
    assert found[0]["pid"] == int(core.name.split(".")[1])
    assert found[0]["signal"] == "SIGSEGV"
    assert found[0]["rank"] == "4"
    assert not any(c["path"].endswith("core.notes.txt") for c in document["cores"])


def test_list_newest_first_with_unreadable_ones_named(crashes: Crashes, tmp_path: Path) -> None:
    older = crashes.crash()
    os.utime(older, (1_000_000_000, 1_000_000_000))
    newer = crashes.crash()
    cut = tmp_path / "cut-core"
    cut.write_bytes(newer.read_bytes()[:100])
    os.utime(cut, (900_000_000, 900_000_000))
    result = run_cli("core", "list", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    paths = [line.split()[-1] if "(" not in line else line.split("  ")[-2] for line in lines]
    assert paths == [str(newer), str(older), str(cut)]
    assert "SIGSEGV" in lines[0] and "unreadable core" in lines[2]


@pytest.mark.parametrize("args", [("core", "list"), ("core", "list", "--json")])
def test_an_empty_directory_is_nothing_found(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run_cli(*args, str(tmp_path))
    assert result.returncode == 3


def test_directories_fifos_and_links_beside_the_cores_are_not_cores(tmp_path: Path) -> None:
    # What a job's working directory holds: a directory named like a core, a FIFO, a link to /dev/zero.
    (tmp_path / "core.5").mkdir()
    os.mkfifo(tmp_path / "core.6")
    (tmp_path / "core.7").symlink_to("/dev/zero")
    (tmp_path / "core.8").write_bytes(b"\x7fELF not a core at all")
    result = run_cli("core", "list", str(tmp_path))
    assert result.returncode == 3, result.stderr
    assert "internal error" not in result.stderr

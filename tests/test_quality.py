"""Lint and types are part of the suite: ruff (format and checks) and mypy --strict on src/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: pip install -r requirements/test.txt")
    return found


def test_ruff_check() -> None:
    result = subprocess.run(
        [_tool("ruff"), "check", "src", "tests", "bench"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = subprocess.run(
        [_tool("ruff"), "format", "--check", "src", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_src() -> None:
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_inprocess_modules_parse_as_python39() -> None:
    """Modules imported inside training processes must not use syntax newer than 3.9."""
    import ast

    for name in ["model.py", "ranks.py"]:
        source = (ROOT / "src" / "rankscope" / name).read_text()
        ast.parse(source, feature_version=(3, 9))
    for path in (ROOT / "src" / "rankscope" / "inproc").glob("*.py"):
        ast.parse(path.read_text(), feature_version=(3, 9))

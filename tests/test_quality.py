"""Lint and types are part of the suite: ruff (format and checks) and mypy --strict on src/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import cluster_fixtures
from tests.support.system import TOOLS, real_path
from tests.support.tools import FIXTURE_NEEDS

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


GUARDED_CONFTEST = """
from tests.support import system

system.TOOLS["fake"] = {"rankscope-fake-tool": "rankscope-no-such-package"}
pytest_plugins = ["tests.support.tools"]
"""

GUARDED_TESTS = """
import subprocess

import pytest


def run_tool():
    return subprocess.run(["rankscope-fake-tool"], capture_output=True, text=True)


@pytest.mark.needs("fake")
def test_declared():
    assert run_tool().stdout == "real\\n"


def test_undeclared():
    run_tool()


def test_undeclared_sees_a_stand_in():
    result = run_tool()
    assert result.returncode == 127 and 'needs("fake")' in result.stderr


def test_no_tool():
    assert True
"""


def _run_guarded(tmp_path: Path, tests: str, *options: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "rankscope-fake-tool"
    tool.write_text("#!/bin/sh\necho real\n")
    tool.chmod(0o755)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = --strict-markers\nmarkers =\n    needs: tools\n"
    )
    (tmp_path / "conftest.py").write_text(GUARDED_CONFTEST)
    (tmp_path / "test_guarded.py").write_text(tests)
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), real_path()]), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *options, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # workers start slowly on a loaded machine
    )


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_test_that_runs_an_undeclared_system_tool_fails(tmp_path: Path, workers: str) -> None:
    """The tool guard (tests/support/tools.py): declared tools run, undeclared ones fail the test,
    in one process and in pytest-xdist workers (as the suite runs)."""
    result = _run_guarded(tmp_path, GUARDED_TESTS, "-n", workers)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    outcomes = {
        line.split()[1].split("::")[-1]: line.split()[0]
        for line in out.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    }
    assert outcomes == {
        "test_declared": "PASSED",
        "test_undeclared": "FAILED",
        "test_undeclared_sees_a_stand_in": "FAILED",
        "test_no_tool": "PASSED",
    }, out
    assert "ran rankscope-fake-tool without declaring it" in out


def test_an_unknown_tool_name_is_a_usage_error(tmp_path: Path) -> None:
    result = _run_guarded(tmp_path, "import pytest\n\n@pytest.mark.needs('pdhs')\ndef test_x():\n    pass\n")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "unknown tool(s) ['pdhs']" in result.stderr


def test_tools_run_by_absolute_path_are_declared() -> None:
    """The guard hides commands found on PATH only: a test module that runs a system tool by its
    absolute path (``/usr/bin/time``) must still declare it."""
    missing = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        for match in re.finditer(r"""["'](?:/usr)?/s?bin/([\w.+-]+)["']""", text):
            owners = [name for name, commands in TOOLS.items() if match[1] in commands]
            if owners and not any(re.search(rf"""needs\([^)]*["']{name}["']""", text) for name in owners):
                missing.append(f"{path.relative_to(ROOT)} runs {match[0]} without needs({owners})")
    assert not missing, "\n".join(missing)


def test_every_tool_fixture_exists() -> None:
    assert set(FIXTURE_NEEDS) <= set(vars(cluster_fixtures)), "FIXTURE_NEEDS names a fixture that is gone"
    assert {tool for tools in FIXTURE_NEEDS.values() for tool in tools} <= set(TOOLS)

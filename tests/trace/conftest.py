"""Traced programs run under every Python the tracer supports that this machine has."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.pythons import SRC, newer_python_param

PYTHONS = [
    pytest.param(sys.executable, id=f"py{sys.version_info[0]}{sys.version_info[1]}"),
    *newer_python_param(),
]


@pytest.fixture(params=PYTHONS)
def python(request: pytest.FixtureRequest, hot_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An interpreter that runs a traced program from the source tree (the tracer is stdlib only)."""
    if hot_path == "pure":
        monkeypatch.setenv("RANKSCOPE_TRACE_PURE", "1")
    else:
        monkeypatch.delenv("RANKSCOPE_TRACE_PURE", raising=False)
    return str(request.param)


@pytest.fixture(params=["c", "pure"])
def hot_path(request: pytest.FixtureRequest) -> str:
    """The C extension where it is built for that interpreter, and the pure-Python fallback."""
    return str(request.param)


def run_program(
    python: str, code: str, tmp_path: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    return subprocess.run(
        [python, str(script), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path
    )

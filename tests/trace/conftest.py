"""Traced programs run under every Python the tracer supports that this machine has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Optional

import pytest
from tests.support.pythons import SRC, newer_python_param

PYTHONS = [
    pytest.param(sys.executable, id=f"py{sys.version_info[0]}{sys.version_info[1]}"),
    *newer_python_param(),
]


@pytest.fixture(params=PYTHONS)
def python(request: pytest.FixtureRequest, hot_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An interpreter that runs a traced program from the source tree (the tracer is stdlib only).

    With ``hot_path == "c"`` the C extension must be importable by that interpreter: it is built
    for the other interpreters here; a missing build of the test interpreter's own (``pip install``
    builds it) fails the test where a compiler exists, and skips it where none does.
    """
    if hot_path == "pure":
        monkeypatch.setenv("RANKSCOPE_TRACE_PURE", "1")
    else:
        monkeypatch.delenv("RANKSCOPE_TRACE_PURE", raising=False)
        problem = c_extension_for(str(request.param))
        if problem is not None:
            if compiler() is None:
                pytest.skip(f"no C compiler here, the tracer runs in pure Python: {problem}")
            pytest.fail(f"the tracer's C extension is not usable: {problem}")
    return str(request.param)


@pytest.fixture(params=["c", "pure"])
def hot_path(request: pytest.FixtureRequest) -> str:
    """The C extension (required where a compiler exists), and the pure-Python fallback."""
    return str(request.param)


EXTENSION_SOURCE = SRC / "rankscope" / "trace" / "_ctrace.c"
_extension_checked: dict[str, Optional[str]] = {}


def compiler() -> Optional[str]:
    """The C compiler this machine has (the one Python was built with, else cc/gcc), or None."""
    configured = (sysconfig.get_config_var("CC") or "").split()
    for name in (configured[:1] or []) + ["cc", "gcc"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def _importable(python: str) -> Optional[str]:
    proc = subprocess.run(
        [python, "-c", "import rankscope.trace._ctrace"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
    )
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def _stale(python: str) -> Optional[str]:
    """Why the built extension ``python`` imports is older than its source (a build of an earlier
    checkout left in the tree, which an import alone does not notice), or None."""
    query = "import rankscope.trace._ctrace as c; print(c.__file__)"
    found = subprocess.run(
        [python, "-c", query],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
    ).stdout.strip()
    if found and os.path.getmtime(found) < EXTENSION_SOURCE.stat().st_mtime:
        return f"stale: {found} is older than {EXTENSION_SOURCE.name}"
    return None


def c_extension_for(python: str) -> Optional[str]:
    """None when ``python`` imports the C extension from the source tree, else why not.

    For an interpreter other than the tests' own it is compiled here first, into the source tree
    next to the one ``pip install -e`` built (``*.so`` is ignored by git).
    """
    if python in _extension_checked:
        return _extension_checked[python]
    problem = _importable(python) or _stale(python)
    cc = compiler()
    if problem is not None and (python != sys.executable or problem.startswith("stale")) and cc is not None:
        query = "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
        include, suffix = subprocess.run(
            [python, "-c", query], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        target = EXTENSION_SOURCE.with_name("_ctrace" + suffix)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        built = subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", f"-I{include}", str(EXTENSION_SOURCE), "-o", str(partial)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if built.returncode == 0:
            os.replace(partial, target)
            problem = _importable(python)
        else:
            problem = f"{cc} failed: {built.stderr.strip()[-500:]}"
    elif problem is not None and python == sys.executable:
        problem += " (pip install -e . builds it)"
    _extension_checked[python] = problem
    return problem


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of the C hot path may compile the extension for another interpreter: it runs gcc."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and "hot_path" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs("gcc"))

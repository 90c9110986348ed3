"""The other Python interpreters this machine has (pyenv), for tests that run rankscope under them.

The test suite runs on one interpreter (the venv's); code that runs inside training processes
(the tracer, progress markers, the in-process handler) is also run from the source tree
(``PYTHONPATH=src``) under the newer ones installed in ``/root/.pyenv/versions``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PYENV = Path("/root/.pyenv/versions")


def pyenv_python(pattern: str) -> Optional[str]:
    """The first pyenv interpreter whose version matches the glob ``pattern``; ``None`` where none is."""
    found = [
        str(p / "bin" / "python") for p in sorted(PYENV.glob(pattern)) if (p / "bin" / "python").exists()
    ]
    return found[0] if found else None


def newer_python() -> Optional[str]:
    """A Python >= 3.12 (sys.monitoring) besides the one running the tests, where one is installed
    (``RANKSCOPE_TEST_NEWER_PYTHON="3.13*"`` picks another pyenv version)."""
    return pyenv_python(os.environ.get("RANKSCOPE_TEST_NEWER_PYTHON", "3.1[2-9]*"))


def newer_python_param() -> list[Any]:
    """One pytest parameter for :func:`newer_python` (skipped where none is installed); none when the
    tests already run on a Python >= 3.12."""
    if sys.version_info >= (3, 12):
        return []
    newer = newer_python()
    return [
        pytest.param(
            newer or "missing",
            id="py3.12+",
            marks=pytest.mark.skipif(newer is None, reason="no Python >= 3.12 installed here"),
        )
    ]


def version_params(*versions: str) -> list[Any]:
    """One pytest parameter per version (``"3.12"``): its pyenv interpreter, skipped where not installed."""
    params = []
    for version in versions:
        found = pyenv_python(f"{version}.*")
        params.append(
            pytest.param(
                found or "missing",
                id=f"py{version}",
                marks=pytest.mark.skipif(found is None, reason=f"no Python {version} installed in {PYENV}"),
            )
        )
    return params

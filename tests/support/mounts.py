"""Small real tmpfs mounts for tests that need a full (or nearly full) filesystem.

A mount is machine-wide state: it is made and removed under ``machine_lock("mount")``, and always
unmounted in teardown. Mounting needs root: elsewhere the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.machine_lock import machine_lock


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str, *, fill: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"3m"``) mounted on ``where`` (created), unmounted on exit.

    ``fill``: a file takes every byte, so the next write fails with ENOSPC.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    with machine_lock("mount"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        if fill:
            with open(where / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
                while filler.write(bytes(1 << 16)):
                    pass
        yield where
    finally:
        with machine_lock("mount"):
            subprocess.run(["umount", str(where)], check=True)

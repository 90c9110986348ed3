"""One lock per machine-wide resource, shared by every test process on this machine.

Tests that change state outside their own directory and processes (kernel.core_pattern, apt
installs, network namespaces, mounts, users) run their change inside ``machine_lock(name)``:
pytest-xdist workers and separate test runs then take turns. The lock is ``flock`` on
``/tmp/rankscope-tests-NAME.lock``; it is re-entrant within a process and released when the
process dies. Names in use: docs/testing.md.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

_held: dict[str, int] = {}


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide lock ``name`` (a short word: ``apt``, ``core-pattern``, ``netns``)."""
    if not re.fullmatch(r"[a-z0-9-]+", name):
        raise ValueError(f"lock name {name!r}: use lower-case letters, digits and '-'")
    if _held.get(name):
        _held[name] += 1
        try:
            yield
        finally:
            _held[name] -= 1
        return
    # Never through a symlink planted in /tmp; not inherited by the programs a test starts.
    fd = os.open(f"/tmp/rankscope-tests-{name}.lock", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held[name] = 1
        try:
            yield
        finally:
            _held.pop(name, None)
    finally:
        os.close(fd)  # closing the only descriptor releases the flock

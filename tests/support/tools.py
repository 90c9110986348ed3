"""Every test gets exactly the system tools it declares, whatever ran before it.

A test declares a tool with ``@pytest.mark.needs("pdsh")`` (names: ``TOOLS`` in system.py), or by
requesting a fixture that starts one (:data:`FIXTURE_NEEDS`). Before the test's fixtures are set
up, its tools are installed. Every other tool is hidden from it: a directory at the front of
``PATH`` holds a stand-in for each undeclared command, and a test that runs one fails with the
marker it is missing, even where the tool is installed. So a test passes alone on a fresh machine
exactly when it passes in the full suite, and forgetting a marker fails on every machine.
Fixture teardown sees every tool (a session fixture's cleanup may run after any test).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Optional

import pytest
from tests.support.system import GUARD_ENV, TOOLS, ensure_tools

#: Fixtures that start a system tool: requesting one declares the tool.
FIXTURE_NEEDS: dict[str, tuple[str, ...]] = {
    "sshd_nodes": ("ssh",),
    "pdsh_installed": ("pdsh",),
    "slurm_cluster": ("slurm",),
    "netns_cluster": ("netns", "ssh"),
    "local_users": ("users",),
}

_BLOCKER = """#!/bin/sh
printf '%s\\n' {command} >> {log}
echo {message} >&2
exit 127
"""


class ToolGuard:
    """The stand-ins directory, and the log of undeclared commands the current test ran."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rankscope-tool-guard-"))
        self.bin = self.root / "bin"
        self.bin.mkdir()
        self.log = self.root / "undeclared.log"
        self.log.touch()
        self.saved_path = os.environ.get("PATH", "")
        os.environ[GUARD_ENV] = str(self.bin)
        os.environ["PATH"] = os.pathsep.join([str(self.bin), self.saved_path])

    def close(self) -> None:
        os.environ["PATH"] = self.saved_path
        os.environ.pop(GUARD_ENV, None)
        shutil.rmtree(self.root, ignore_errors=True)

    def allow(self, names: Optional[set[str]]) -> None:
        """Hide every command outside the tools ``names`` (None: hide nothing)."""
        allowed = set(TOOLS) if names is None else names
        visible = {command for name in allowed for command in TOOLS[name]}
        for command in sorted({command for commands in TOOLS.values() for command in commands}):
            stand_in = self.bin / command
            if command in visible:
                stand_in.unlink(missing_ok=True)
            elif not stand_in.exists():
                stand_in.write_text(self._blocker(command))
                stand_in.chmod(0o755)

    def _blocker(self, command: str) -> str:
        message = (
            f"rankscope tests: {command} is hidden from this test, which does not declare it: {_fix(command)}"
        )
        return _BLOCKER.format(
            command=shlex.quote(command), log=shlex.quote(str(self.log)), message=shlex.quote(message)
        )

    def take_undeclared(self) -> list[str]:
        commands = self.log.read_text().split()
        self.log.write_text("")
        return sorted(set(commands))


_guard: Optional[ToolGuard] = None


def needed_tools(item: pytest.Item) -> set[str]:
    names = {str(name) for mark in item.iter_markers("needs") for name in mark.args}
    for fixture in getattr(item, "fixturenames", ()):
        names.update(FIXTURE_NEEDS.get(fixture, ()))
    return names


def pytest_configure(config: pytest.Config) -> None:
    global _guard
    _guard = ToolGuard()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _guard
    if _guard is not None:
        _guard.close()
        _guard = None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        unknown = sorted(needed_tools(item) - set(TOOLS))
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: unknown tool(s) {unknown} in needs(); known: {sorted(TOOLS)}"
            )
        fixtures = getattr(item, "fixturenames", ())
        implied = {tool for fixture in fixtures for tool in FIXTURE_NEEDS.get(fixture, ())}
        if implied:  # so that `-m needs` selects every test that uses a system tool
            item.add_marker(pytest.mark.needs(*sorted(implied)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    assert _guard is not None
    names = needed_tools(item)
    _guard.take_undeclared()  # anything run between tests is nobody's
    ensure_tools(*sorted(names))
    _guard.allow(names)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    assert _guard is not None
    _guard.allow(None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if _guard is None or call.when == "teardown":
        return report
    undeclared = _guard.take_undeclared()
    if undeclared:
        message = "\n".join(f"ran {command} without declaring it: {_fix(command)}" for command in undeclared)
        if report.failed and report.longrepr:
            message = f"{report.longrepr}\n\n{message}"
        report.outcome = "failed"
        report.longrepr = message
    return report


def _fix(command: str) -> str:
    owners = [name for name, commands in sorted(TOOLS.items()) if command in commands]
    return " or ".join(f'@pytest.mark.needs("{name}")' for name in owners) + " (docs/testing.md)"

"""`rankscope core check`: the verdict and the fix commands, on made-up nodes and on this one."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Callable

from tests.support.machine_lock import machine_lock

from rankscope.core.setup import SUGGESTED_PATTERN, read_setup, render
from rankscope.doctor.system import System

UNLIMITED = resource.RLIM_INFINITY


def _node(
    tmp_path: Path, pattern: str, uses_pid: str = "0", limits: tuple[int, int] = (0, UNLIMITED)
) -> System:
    kernel = tmp_path / "proc/sys/kernel"
    kernel.mkdir(parents=True)
    (kernel / "core_pattern").write_text(pattern + "\n")
    (kernel / "core_uses_pid").write_text(uses_pid + "\n")
    limit: Callable[[int], tuple[int, int]] = lambda _resource: limits  # noqa: E731
    return System(root=tmp_path, rlimit=limit)


def test_no_core_with_ulimit_zero_and_the_commands_that_fix_it(tmp_path: Path) -> None:
    setup = read_setup(_node(tmp_path, "core", uses_pid="1"))
    assert not setup.will_dump
    assert setup.fix_shell == ["ulimit -c unlimited"]
    assert any("limits.d" in command for command in setup.fix_persistent)
    assert any(command.startswith("ulimit -c unlimited; torchrun") for command in setup.fix_job)


def test_hard_limit_zero_needs_root_or_the_runtime(tmp_path: Path) -> None:
    setup = read_setup(_node(tmp_path, "core", limits=(0, 0)))
    assert any("hard limit is 0" in problem for problem in setup.problems)
    assert any("hard core unlimited" in command for command in setup.fix_persistent)
    assert any("--ulimit core=-1" in command for command in setup.fix_job)


def test_apport_pipe_is_a_problem_with_a_path_pattern_as_the_fix(tmp_path: Path) -> None:
    setup = read_setup(_node(tmp_path, "|/usr/share/apport/apport -p%p -s%s", limits=(UNLIMITED, UNLIMITED)))
    assert setup.pipe_program == "/usr/share/apport/apport"
    assert any(SUGGESTED_PATTERN in command and "sysctl -w" in command for command in setup.fix_shell)
    assert any("/etc/sysctl.d/" in command for command in setup.fix_persistent)


def _systemd_coredump(tmp_path: Path, installed: bool, socket: bool) -> System:
    node = _node(tmp_path, "|/lib/systemd/systemd-coredump %P %u", limits=(UNLIMITED, UNLIMITED))
    if installed:
        (tmp_path / "lib/systemd").mkdir(parents=True)
        (tmp_path / "lib/systemd/systemd-coredump").write_text("")
    if socket:
        (tmp_path / "run/systemd").mkdir(parents=True)
        (tmp_path / "run/systemd/coredump").write_text("")
    return node


def test_systemd_coredump_is_fine(tmp_path: Path) -> None:
    setup = read_setup(_systemd_coredump(tmp_path, installed=True, socket=True))
    assert setup.will_dump and not setup.problems and "coredumpctl" in setup.where


def test_a_pipe_to_a_handler_that_is_not_installed_drops_every_core(tmp_path: Path) -> None:
    setup = read_setup(_systemd_coredump(tmp_path, installed=False, socket=False))
    assert not setup.will_dump
    assert any("not installed: the kernel drops every core" in problem for problem in setup.problems)
    assert "a crash here leaves a core: no" in render(setup)


def test_a_pipe_to_a_handler_that_is_not_running_drops_the_core(tmp_path: Path) -> None:
    setup = read_setup(_systemd_coredump(tmp_path, installed=True, socket=False))
    assert not setup.will_dump
    assert any("/run/systemd/coredump is missing" in problem for problem in setup.problems)
    assert any("systemctl start systemd-coredump.socket" in command for command in setup.fix_shell)


def test_a_container_whose_pattern_pipes_to_the_host(tmp_path: Path) -> None:
    node = _node(tmp_path, "|/usr/share/apport/apport %p", limits=(UNLIMITED, UNLIMITED))
    (tmp_path / ".dockerenv").write_text("")
    setup = read_setup(node)
    assert any("on the host" in problem and "never appear in here" in problem for problem in setup.problems)


def test_a_shared_pattern_without_pid_loses_all_but_one_core(tmp_path: Path) -> None:
    setup = read_setup(_node(tmp_path, "core", uses_pid="0", limits=(UNLIMITED, UNLIMITED)))
    assert setup.will_dump
    assert any("only the last core survives" in problem for problem in setup.problems)
    assert any("kernel.core_uses_pid=1" in command for command in setup.fix_shell)
    assert "a crash here leaves a core: yes, but see the problems below" in render(setup)
    fine = read_setup(_node(tmp_path / "b", "core", uses_pid="1", limits=(UNLIMITED, UNLIMITED)))
    assert not fine.problems


def test_a_missing_directory_drops_the_core(tmp_path: Path) -> None:
    setup = read_setup(_node(tmp_path, "/no/such/dir/core.%p", limits=(UNLIMITED, UNLIMITED)))
    assert setup.directory == "/no/such/dir" and setup.directory_writable is False
    assert not setup.will_dump
    assert "sudo mkdir -p /no/such/dir && sudo chmod 1777 /no/such/dir" in setup.fix_shell


def _limit_core(soft: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(
        resource.RLIMIT_CORE, (soft, resource.getrlimit(resource.RLIMIT_CORE)[1])
    )


def test_this_node_read_for_real() -> None:
    with machine_lock("core-pattern"):  # another test may be pointing core_pattern elsewhere
        _check_this_node()


def _check_this_node() -> None:
    for soft, expected in ((0, False), (resource.getrlimit(resource.RLIMIT_CORE)[1], True)):
        proc = subprocess.run(
            [sys.executable, "-m", "rankscope", "core", "check", "--json"],
            capture_output=True,
            text=True,
            preexec_fn=_limit_core(soft),
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        document = json.loads(proc.stdout)
        assert document["schema"] == "rankscope.core.check/1"
        assert document["soft_limit"] == soft
        assert document["core_pattern"] == Path("/proc/sys/kernel/core_pattern").read_text().strip()
        if document["directory_writable"] is not False and not document["pipe_program"]:
            assert document["will_dump"] is expected

"""rankscope.procfs on real processes: a Python child, a sleep, a zombie, a dead pid, an embedded interpreter."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_cli
from tests.support.machine_lock import machine_lock

from rankscope import procfs
from rankscope.procs import ProcessTable, all_python, is_rankscope
from rankscope.ranks import rank_of_pid

SRC = Path(__file__).resolve().parents[1] / "src"
RANK_ENV = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "t"}
SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(120)"


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


def _rank_of(pid: int) -> str | None:
    try:
        return procfs.environ(pid).get("RANK")
    except OSError:
        return None


@pytest.fixture
def python_child() -> Iterator[subprocess.Popen[str]]:
    # RANK first, and a value with "=" in it: variable() reads the start, the middle and odd values.
    env = {**RANK_ENV, **os.environ, "ODD": "a=b", "EMPTY": ""}
    proc = _start([sys.executable, "-c", SLEEPER, "an-argument"], env=env)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    _stop(proc)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[str]]:
    """A process that is not Python, but carries rank variables (a shell wrapper would)."""
    proc = _start(["sleep", "120"], env={**os.environ, **RANK_ENV})
    # The kernel names the new executable before it lays out the new environment (execve sets
    # /proc/PID/exe first): a read in between finds the old program gone and no variables yet.
    _wait_for(lambda: procfs.exe(proc.pid).endswith("/sleep") and _rank_of(proc.pid) == "3")
    yield proc
    _stop(proc)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A host program that is not named python and runs an interpreter from libpython (uwsgi, a C++ app)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    binary = Path(sys.executable).resolve()
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    if "libpython" not in ldd:
        pytest.skip(f"{binary} links Python statically: no libpython to embed")
    host = tmp_path / "host-app"
    shutil.copy(binary, host)
    env = {
        **os.environ,
        **RANK_ENV,
        "LD_LIBRARY_PATH": libdir,
        "PYTHONHOME": sys.base_prefix,
        "PYTHONPATH": "",
    }
    proc = _start([str(host), "-c", SLEEPER], env=env)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    _stop(proc)


def _wait_for(condition: object, seconds: float = 30.0) -> None:
    """Poll a condition the kernel settles shortly (exec done, a child exited); fail if it never does."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the process never got there"
        time.sleep(0.01)


def test_python_child_is_read_whole(python_child: subprocess.Popen[str]) -> None:
    entry = procfs.process(python_child.pid)
    assert entry is not None
    assert entry.pid == python_child.pid and entry.ppid == os.getpid()
    assert entry.state in ("S", "R")
    assert entry.cmdline == [sys.executable, "-c", SLEEPER, "an-argument"]
    assert entry.command == " ".join(entry.cmdline)
    assert Path(entry.exe) == Path(sys.executable).resolve()
    assert entry.uid == os.geteuid()
    assert entry.environ is not None and {k: entry.environ[k] for k in RANK_ENV} == RANK_ENV
    assert (entry.variable("RANK"), entry.variable("WORLD_SIZE")) == ("3", "8")
    assert (entry.variable("ODD"), entry.variable("EMPTY"), entry.variable("ANK")) == ("a=b", "", None)
    assert entry.is_python is True
    assert procfs.tracer_pid(python_child.pid) == 0
    assert procfs.process(python_child.pid).ppid == os.getpid()  # type: ignore[union-attr]
    assert rank_of_pid(python_child.pid).rank == 3


def test_the_table_has_every_process_once_and_knows_rankscope_s_own_chain(
    python_child: subprocess.Popen[str], sleeper: subprocess.Popen[str]
) -> None:
    procs = procfs.table()
    assert {python_child.pid, sleeper.pid, os.getpid(), os.getppid()} <= set(procs)
    assert procs[sleeper.pid].comm == "sleep" and procs[sleeper.pid].ppid == os.getpid()
    mine = procfs.self_and_ancestors(procs)
    assert {os.getpid(), os.getppid()} <= mine
    assert python_child.pid not in mine and sleeper.pid not in mine


def test_a_sleep_is_not_python_even_with_rank_variables(sleeper: subprocess.Popen[str]) -> None:
    entry = procfs.process(sleeper.pid)
    assert entry is not None and entry.comm == "sleep"
    assert entry.is_python is False  # names say nothing, and its maps hold no interpreter
    assert procfs.maps_python(sleeper.pid) is False
    table = ProcessTable()
    assert table.has_rank(sleeper.pid)
    assert not table.is_candidate_worker(sleeper.pid)
    assert sleeper.pid not in {w.pid for w in all_python(table).workers}


def test_an_interpreter_with_another_name_is_python_by_its_maps(embedded: subprocess.Popen[str]) -> None:
    entry = procfs.process(embedded.pid)
    assert entry is not None
    assert (entry.comm, Path(entry.exe).name, Path(entry.cmdline[0]).name) == ("host-app",) * 3
    assert procfs.maps_python(embedded.pid) is True
    assert entry.is_python is True
    table = ProcessTable()
    assert table.is_candidate_worker(embedded.pid)
    assert embedded.pid in {w.pid for w in all_python(table).workers}


def test_python_child_is_a_candidate_worker_and_its_rank_is_read(python_child: subprocess.Popen[str]) -> None:
    table = ProcessTable()
    assert table.is_candidate_worker(python_child.pid)
    worker = table.worker(python_child.pid, host="h")
    assert (worker.rank.rank, worker.rank.local_rank, worker.rank.world_size) == (3, 1, 8)
    assert worker.rank.launcher == "torchrun"
    assert python_child.pid in {w.pid for w in all_python(table).workers}
    assert os.getpid() not in {w.pid for w in all_python(table).workers}


def test_a_zombie_has_a_state_and_a_parent_but_nothing_else() -> None:
    proc = subprocess.Popen(["true"])
    try:
        _wait_for(lambda: (procfs.process(proc.pid) or procfs.ProcfsEntry(0, "", "?", 0)).state == "Z")
        entry = procfs.process(proc.pid)
        assert entry is not None and entry.ppid == os.getpid() and entry.comm == "true"
        assert entry.cmdline == [] and entry.command == "[true]"
        assert entry.exe == ""
        assert entry.environ is None
        with pytest.raises(FileNotFoundError):  # the kernel says ESRCH: gone, as far as a caller cares
            rank_of_pid(proc.pid)
        result = run_cli("whoami", "--pid", str(proc.pid))
        assert (result.returncode, result.stderr.strip()) == (
            8,
            f"rankscope: error: no process with pid {proc.pid} — check the pid with ps or pgrep",
        )
    finally:
        proc.wait()


def test_a_dead_pid_reads_as_gone() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    pid = proc.pid
    assert procfs.process(pid) is None
    assert procfs.cmdline(pid) == [] and procfs.exe(pid) == ""
    assert procfs.uid(pid) is None
    assert procfs.maps_python(pid) is None
    assert procfs.status_field(pid, "TracerPid") is None and procfs.tracer_pid(pid) == 0
    assert procfs.cwd(pid) is None
    with pytest.raises(FileNotFoundError):
        procfs.environ(pid)
    with pytest.raises(FileNotFoundError):
        rank_of_pid(pid)
    assert pid not in procfs.table()


def test_status_fields_of_this_process() -> None:
    assert procfs.status_field("self", "Pid") == str(os.getpid())
    assert procfs.status_field("self", "NoSuchField") is None
    cap_eff = int(procfs.status_field("self", "CapEff") or "0", 16)
    assert procfs.has_cap_sys_ptrace() == bool(cap_eff & (1 << 19))
    scope = procfs.yama_ptrace_scope()
    if Path("/proc/sys/kernel/yama/ptrace_scope").exists():
        assert scope == int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    else:
        assert scope is None


def test_the_working_directory_of_a_child_and_this_node_s_core_pattern(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "30"], cwd=tmp_path)
    try:
        assert procfs.cwd(proc.pid) == str(tmp_path) and procfs.cwd("self") == os.getcwd()
    finally:
        proc.kill()
        proc.wait()
    with machine_lock("core-pattern"):  # another test may be pointing core_pattern elsewhere
        assert procfs.core_pattern() == Path("/proc/sys/kernel/core_pattern").read_text().strip()


def test_boot_time_thread_files_and_the_pid_namespace_of_this_process() -> None:
    boot = procfs.boot_time()
    started = procfs.started_after_boot("self")
    assert boot is not None and started is not None
    # this process started after boot and before now (btime is whole seconds)
    assert boot - 1 <= boot + started <= time.time() + 1
    assert (
        procfs.task_file("self", threading.get_native_id(), "comm")
        == Path("/proc/self/comm").read_text().strip()
    )
    assert procfs.task_file("self", 2**22 + 1, "comm") is None  # no such thread
    assert procfs.pid_namespace() == os.stat("/proc/self/ns/pid").st_ino != 0


def test_a_descriptor_is_a_file_only_when_it_is_a_regular_one(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    read_end, write_end = os.pipe()
    with open(log, "w") as handle:
        target, st = procfs.fd_file("self", handle.fileno()) or ("", os.stat("/"))
        assert target == str(log) and st.st_ino == os.fstat(handle.fileno()).st_ino
        assert procfs.fd_file("self", write_end) is None  # a pipe
    os.close(read_end)
    os.close(write_end)
    assert procfs.fd_file("self", write_end) is None  # closed


def test_a_comm_with_spaces_and_parentheses_is_read_whole(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = _start([str(odd), "120"])
    try:
        _wait_for(lambda: (procfs.process(proc.pid) or procfs.ProcfsEntry(0, "", "", 0)).comm == "a) b (c")
        entry = procfs.process(proc.pid)
        assert entry is not None and entry.ppid == os.getpid() and entry.state in ("S", "R")
    finally:
        _stop(proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a reader as another user")
def test_another_users_process_is_python_by_name_and_unknown_otherwise(
    python_child: subprocess.Popen[str], sleeper: subprocess.Popen[str]
) -> None:
    """As an unprivileged user, root's maps and environ are unreadable: names decide, or nothing does."""
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no system python3 an unprivileged user can run")
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('procfs', {str(SRC / 'rankscope' / 'procfs.py')!r})\n"
        "procfs = importlib.util.module_from_spec(spec); spec.loader.exec_module(procfs)\n"
        "for pid in map(int, sys.argv[1:]):\n"
        "    entry = procfs.process(pid)\n"
        "    print(entry.comm, entry.is_python, entry.environ, entry.uid)\n"
    )
    result = subprocess.run(
        [system_python, "-c", script, str(python_child.pid), str(sleeper.pid)],
        capture_output=True,
        text=True,
        user=65534,
        group=65534,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    child, sleep = result.stdout.splitlines()
    assert child.split()[1:] == ["True", "None", "0"]
    assert sleep.split() == ["sleep", "None", "None", "0"]


def test_procfs_parses_as_python39_and_imports_only_os() -> None:
    """rankscope.ranks reads environments through it inside training processes (Python 3.9, stdlib)."""
    tree = ast.parse((SRC / "rankscope" / "procfs.py").read_text(), feature_version=(3, 9))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"os", "errno", "__future__", "typing"}


def test_start_times_order_a_child_after_its_parent() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        parent_start, child_start = procfs.started_after_boot(), procfs.started_after_boot(child.pid)
        assert parent_start is not None and child_start is not None
        assert 0 < parent_start <= child_start
    finally:
        child.communicate(b"")


def test_this_process_started_before_now() -> None:
    from rankscope.stacks.local import process_started

    started = process_started()
    assert started is not None and started <= time.monotonic()


def test_descriptors_of_this_process() -> None:
    read_end, write_end = os.pipe()
    try:
        links = dict(procfs.fd_links("self"))
        assert links[read_end].startswith("pipe:[") and links[read_end] == links[write_end]
        assert any(line.startswith("flags:") for line in procfs.fdinfo("self", write_end))
        assert procfs.net_table("self", "tcp").startswith("  sl")
        soft, _hard = procfs.open_files_limit("self")
        assert soft is None or soft >= len(links)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert procfs.fdinfo(999999999, 0) == [] and procfs.net_table(999999999, "tcp") == ""
    with pytest.raises(FileNotFoundError):
        procfs.fd_links(999999999)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["rankscope", "stacks"], True),
        (["/venv/bin/python", "/venv/bin/rankscope", "stacks", "--pid", "7"], True),
        (["python3.12", "-m", "rankscope", "trace", "tail", "traces"], True),
        # `trace run` runs the program in its own process: the worker torchrun --no-python starts
        (["/venv/bin/python", "/venv/bin/rankscope", "trace", "run", "--", "train.py"], False),
        (["python3.12", "-m", "rankscope", "trace", "run", "--out", "t", "--", "train.py"], False),
        (["python", "train.py", "rankscope"], False),
    ],
)
def test_a_traced_program_is_a_target_and_other_rankscope_commands_are_not(
    argv: list[str], command: bool
) -> None:
    entry = procfs.ProcfsEntry(1, "python", "S", 0)
    entry._cmdline = argv
    assert is_rankscope(entry) is command


def test_stat_fields_and_start_ticks_of_a_live_and_a_gone_process() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        fields = procfs.stat_fields(child.pid)
        assert (
            fields is not None and fields[0] in "RS" and int(fields[1]) == os.getpid()
        )  # state, then the parent
        assert procfs.start_ticks(child.pid) >= procfs.start_ticks()  # started after this process
    finally:
        os.killpg(child.pid, 9)
        child.wait()
    assert procfs.stat_fields(child.pid) is None
    assert procfs.start_ticks(child.pid) == 0


def test_thread_cpu_counts_what_the_thread_ran_and_nothing_for_a_gone_one() -> None:
    import os
    import time

    from rankscope import procfs

    before = procfs.thread_cpu(os.getpid(), os.getpid())
    until = time.process_time() + 0.05
    while time.process_time() < until:  # this (main) thread on the CPU for 50 ms
        pass
    after = procfs.thread_cpu(os.getpid(), os.getpid())
    assert before is not None and after is not None and after > before
    assert procfs.thread_cpu(os.getpid(), 2**22 + 1) is None

"""The in-process handler in real processes: the .pth bootstrap (unset: nothing; set: enabled), the
faulthandler dump on its signal, the request channel, cleanup at exit, and the .pth in a built wheel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankscope.inproc import runtime

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = """
import sys, threading, time
def beat():
    while True:
        time.sleep(0.5)
threading.Thread(target=beat, name="heartbeat-0", daemon=True).start()
def wait_here():
    print("up", "rankscope.inproc.handler" in sys.modules, flush=True)
    time.sleep(float(sys.argv[1]))
wait_here()
"""


def _start(directory: Path, seconds: float = 60, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"}
    env.update({runtime.ENV_DIR: str(directory), **extra})
    return subprocess.Popen(
        [sys.executable, "-c", SLEEPER, str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def enabled_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    directory = tmp_path / "rt"
    proc = _start(directory, RANKSCOPE_INPROC="1")
    try:
        assert proc.stdout is not None and proc.stdout.readline().split() == ["up", "True"]
        yield proc, directory
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_unset_variable_imports_nothing(tmp_path: Path) -> None:
    proc = _start(tmp_path / "rt", seconds=0)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["up", "False"]
    assert not (tmp_path / "rt").exists()
    code = "import sys; print(sorted(m for m in sys.modules if m.startswith('rankscope')))"
    env = {k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"}
    assert (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
        == "[]"
    )
    env["RANKSCOPE_INPROC"] = "0"
    env[runtime.ENV_DIR] = str(tmp_path / "rt0")
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert not (tmp_path / "rt0").exists()


def test_signal_dumps_every_thread_and_requests_are_answered(
    enabled_process: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, directory = enabled_process
    files = runtime.files_of(str(directory), proc.pid)
    assert {"inproc", "stacks", "req"} <= set(files)
    info = json.loads(Path(files["inproc"]).read_text())
    assert info["pid"] == proc.pid and info["signal_name"].startswith("SIGRTMIN+")
    assert {"ping", "threads", "fr"} <= set(info["kinds"])
    caught = int(Path(f"/proc/{proc.pid}/status").read_text().split("SigCgt:")[1].split()[0], 16)
    assert caught & (1 << (info["signal"] - 1))

    os.kill(proc.pid, info["signal"])
    stacks = Path(files["stacks"])
    deadline = time.monotonic() + 10
    while "wait_here" not in stacks.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    text = stacks.read_text()
    assert "in wait_here" in text and "in beat" in text and text.count("(most recent call first)") == 3
    assert proc.poll() is None  # the signal did not end it

    fd = os.open(files["req"], os.O_WRONLY | os.O_NONBLOCK)
    os.write(
        fd,
        b'{"v": 1, "id": "ab12", "kind": "threads"}\n{"v": 1, "id": "cd34", "kind": "nope"}\n'
        b'{"v": 1, "id": "ef56", "kind": "fr", "args": {"id": "ef56"}}\n',
    )
    os.close(fd)
    replies = {}
    deadline = time.monotonic() + 10
    while len(replies) < 3 and time.monotonic() < deadline:
        for ident in ("ab12", "cd34", "ef56"):
            path = directory / f"{info['base']}.{ident}.reply"
            if path.exists():
                replies[ident] = json.loads(path.read_text())
        time.sleep(0.02)
    names = {name for name, _native, _daemon in replies["ab12"]["result"].values()}
    assert {"MainThread", "heartbeat-0", "rankscope-inproc"} <= names
    assert replies["cd34"]["ok"] is False and "unknown request kind 'nope'" in replies["cd34"]["error"]
    # A process without torch has no recorder: said, and torch is not imported to find out.
    assert replies["ef56"]["result"] == {
        "name": None,
        "problem": "torch is not imported in this process: no flight recorder",
    }
    assert "libtorch" not in Path(f"/proc/{proc.pid}/maps").read_text()


def test_normal_exit_removes_the_files_and_a_crash_leaves_them(tmp_path: Path) -> None:
    proc = _start(tmp_path / "rt", seconds=1, RANKSCOPE_INPROC="1")
    assert proc.stdout is not None and proc.stdout.readline().startswith("up")
    # A recorder dump its requester never removed (the requester was killed) goes at exit too.
    base = json.loads(Path(runtime.files_of(str(tmp_path / "rt"), proc.pid)["inproc"]).read_text())["base"]
    (tmp_path / "rt" / f"{base}.ab12.fr").write_bytes(b"dump")
    proc.communicate(timeout=60)
    assert proc.returncode == 0 and os.listdir(tmp_path / "rt") == []
    proc = _start(tmp_path / "crash", seconds=60, RANKSCOPE_INPROC="1")
    assert proc.stdout is not None and proc.stdout.readline().startswith("up")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert "inproc" in runtime.files_of(str(tmp_path / "crash"), proc.pid)
    # The next process that enables the handler there removes a dead process's handler files.
    after = _start(tmp_path / "crash", seconds=0, RANKSCOPE_INPROC="1")
    after.communicate(timeout=60)
    assert runtime.files_of(str(tmp_path / "crash"), proc.pid) == {}


def test_unsafe_directory_leaves_the_job_running(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "rt").symlink_to(tmp_path / "elsewhere")
    proc = _start(tmp_path / "rt", seconds=0, RANKSCOPE_INPROC="1")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.startswith("up")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_wheel_install_in_a_fresh_venv_enables_the_handler(tmp_path: Path) -> None:
    """A non-editable install gets the bootstrap too: the wheel's .pth lands in site-packages, and a fresh
    interpreter of that venv enables the handler when RANKSCOPE_INPROC is set (and only then)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("rankscope-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert b"RANKSCOPE_INPROC" in archive.read("rankscope-inproc.pth")
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        python = venv / "bin" / "python"
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        archive.extractall(site)  # what an installer does with a pure wheel (its .dist-info included)
    code = "import sys, rankscope.inproc.handler as h; print(h.enabled(), h.__file__.startswith(sys.prefix))"
    env = {k: v for k, v in os.environ.items() if k not in ("RANKSCOPE_INPROC", "PYTHONPATH")}
    env[runtime.ENV_DIR] = str(tmp_path / "rt")
    off = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert off.stdout.split() == ["False", "True"], off.stderr
    on = subprocess.run(
        [str(python), "-c", code],
        env={**env, "RANKSCOPE_INPROC": "1"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert on.stdout.split() == ["True", "True"], on.stderr


def test_a_signal_the_process_already_catches_is_not_taken(tmp_path: Path) -> None:
    code = (
        "import signal, rankscope.inproc.handler as h\n"
        "signal.signal(h.default_signal(), lambda *a: None)  # the job's own handler\n"
        "print(h.enable(), h.last_error())\n"
    )
    env = {**os.environ, runtime.ENV_DIR: str(tmp_path / "rt")}
    env.pop("RANKSCOPE_INPROC", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("False RuntimeError: SIGRTMIN+4 is already caught"), out.stderr
    assert "RANKSCOPE_INPROC_SIGNAL" in out.stdout
    assert os.listdir(tmp_path / "rt") == []  # what it had created is removed again

"""The in-process handler in real processes: the .pth bootstrap (unset: nothing; set: enabled), the
stacks request, the request channel and its protocol versions, the crash dump, cleanup at exit, the
job's own signal handlers, and the .pth in a built wheel."""

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
from typing import Any

import pytest

from rankscope.inproc import handler, runtime

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


def _ask(directory: Path, base: str, requests: bytes, idents: list[str]) -> dict[str, Any]:
    """Write request lines into the handler's FIFO; its replies by id (waiting up to 10 s for all)."""
    fd = os.open(directory / f"{base}.req", os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, requests)
    os.close(fd)
    replies: dict[str, Any] = {}
    deadline = time.monotonic() + 10
    while len(replies) < len(idents) and time.monotonic() < deadline:
        for ident in idents:
            path = directory / f"{base}.{ident}.reply"
            if ident not in replies and path.exists():
                replies[ident] = json.loads(path.read_text())
        time.sleep(0.02)
    return replies


def test_stacks_request_dumps_every_thread_and_requests_are_answered(
    enabled_process: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, directory = enabled_process
    files = runtime.files_of(str(directory), proc.pid)
    assert {"inproc", "req", "crash"} <= set(files) and "stacks" not in files
    info = json.loads(Path(files["inproc"]).read_text())
    assert info["pid"] == proc.pid and info["version"] == handler.VERSION == 2
    assert {"stacks", "ping", "threads", "fr"} <= set(info["kinds"])
    # No signal is caught for the dump (protocol 1's signal is named only so a rankscope of
    # protocol 1 reads it, finds it not caught and does not signal).
    caught = int(Path(f"/proc/{proc.pid}/status").read_text().split("SigCgt:")[1].split()[0], 16)
    assert not caught & (1 << (info["signal"] - 1))

    replies = _ask(
        directory,
        info["base"],
        b'{"v": 2, "id": "aa01", "kind": "stacks"}\n{"v": 2, "id": "ab12", "kind": "threads"}\n'
        b'{"v": 2, "id": "cd34", "kind": "nope"}\n{"v": 2, "id": "ef56", "kind": "fr", "args": {"id": "ef56"}}\n',
        ["aa01", "ab12", "cd34", "ef56"],
    )
    dump = replies["aa01"]["result"]
    text = dump["text"]
    assert "in wait_here" in text and "in beat" in text and text.count("(most recent call first)") == 3
    assert f"Current thread 0x{info['handler_thread']:016x}" in text  # the handler's own thread
    assert {name for name, _native, _daemon in dump["threads"].values()} >= {"MainThread", "heartbeat-0"}
    assert proc.poll() is None
    names = {name for name, _native, _daemon in replies["ab12"]["result"].values()}
    assert {"MainThread", "heartbeat-0", "rankscope-inproc"} <= names
    assert replies["cd34"]["ok"] is False and "unknown request kind 'nope'" in replies["cd34"]["error"]
    # A process without torch has no recorder: said, and torch is not imported to find out.
    assert replies["ef56"]["result"] == {
        "name": None,
        "problem": "torch is not imported in this process: no flight recorder",
    }
    assert "libtorch" not in Path(f"/proc/{proc.pid}/maps").read_text()


def test_requests_of_another_protocol_version(enabled_process: tuple[subprocess.Popen[str], Path]) -> None:
    """An older requester's requests are answered; a newer one's are refused, both versions named."""
    proc, directory = enabled_process
    base = json.loads(Path(runtime.files_of(str(directory), proc.pid)["inproc"]).read_text())["base"]
    replies = _ask(
        directory,
        base,
        b'{"v": 1, "id": "01", "kind": "threads"}\n{"v": 3, "id": "03", "kind": "stacks"}\n'
        b'{"id": "04", "kind": "ping"}\n',
        ["01", "03", "04"],
    )
    assert replies["01"]["ok"] is True and replies["01"]["v"] == 2
    assert replies["03"]["ok"] is False and replies["03"]["v"] == 2
    assert "in-process protocol 3, the job's rankscope speaks 2" in replies["03"]["error"]
    assert replies["04"]["ok"] is False and "without a protocol version" in replies["04"]["error"]
    assert proc.poll() is None


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


@pytest.mark.needs("gcc")
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


def test_the_jobs_own_signal_handlers_stay_its_own(tmp_path: Path) -> None:
    """enable() installs no handler of its own: the job's handlers (the old default signal's too) stay,
    and a faulthandler the job enabled itself is left as it is (no crash file of rankscope's)."""
    code = (
        "import faulthandler, signal, sys, rankscope.inproc.handler as h\n"
        "mine = lambda *a: None\n"
        "signal.signal(h.legacy_signal(), mine)\n"
        "signal.signal(signal.SIGUSR1, mine)\n"
        "faulthandler.enable(file=sys.stderr)\n"
        "print(h.enable(), signal.getsignal(h.legacy_signal()) is mine, signal.getsignal(signal.SIGUSR1) is mine)\n"
    )
    env = {**os.environ, runtime.ENV_DIR: str(tmp_path / "rt")}
    env.pop("RANKSCOPE_INPROC", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr


def _abort(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run ``code`` (which aborts) with the handler enabled: the run, and its crash file."""
    env = {**os.environ, runtime.ENV_DIR: str(tmp_path / "rt"), "RANKSCOPE_INPROC": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGABRT
    (name,) = [n for n in os.listdir(tmp_path / "rt") if n.endswith(".crash")]
    return proc, tmp_path / "rt" / name


def test_a_process_dying_of_abort_leaves_a_c_level_dump(tmp_path: Path) -> None:
    """The one all-threads dump made from a signal handler: in a process that dies anyway. Its exit
    status is the signal's; the dump stays after the crash, and the next start leaves it there."""
    _, crash = _abort(
        tmp_path,
        "import os, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), name='sleeper', daemon=True).start()\n"
        "def going_down():\n"
        "    os.abort()\n"
        "going_down()\n",
    )
    text = crash.read_text()
    assert "Fatal Python error: Aborted" in text and "in going_down" in text
    assert text.count("(most recent call first)") == 3  # the sleeper and the handler thread too
    env = {**os.environ, runtime.ENV_DIR: str(tmp_path / "rt"), "RANKSCOPE_INPROC": "1"}
    again = subprocess.run([sys.executable, "-c", "pass"], env=env, timeout=60)
    assert again.returncode == 0 and crash.read_text() == text


def test_a_faulthandler_the_job_enables_later_wins(tmp_path: Path) -> None:
    proc, crash = _abort(
        tmp_path,
        "import faulthandler, os, sys\n"
        "faulthandler.enable(file=sys.stderr)  # the job's own, after the handler's start\n"
        "os.abort()\n",
    )
    assert "Fatal Python error: Aborted" in proc.stderr
    assert crash.read_text() == ""

"""Root's `rankscope stacks` beside a job whose user plants things in the job's runtime directory.

The job runs as an unprivileged user made by the fixture (tests/support/users.py), with the handler
(RANKSCOPE_INPROC=1) and a progress marker. That user replaces the files rankscope reads with a FIFO
(which would block a plain ``open`` for ever) or a symbolic link to a file only root may read. Root's
rankscope must finish within its deadline, read nothing through the link, and say what it refused;
SIGTERM ends it at once in any phase, leaving no process of its own and the job untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.users import LocalUser as User
from tests.support.users import job_user, local_users  # noqa: F401 - fixtures

from rankscope.inproc import runtime

pytestmark = pytest.mark.slow

JOB = """
import rankscope, threading, time
rankscope.progress(step=7, phase="train")
def beat():
    while True:
        time.sleep(0.2)
threading.Thread(target=beat, name="heartbeat-0", daemon=True).start()
print("up", flush=True)
time.sleep(300)
"""
HOLDS_GIL = """
import ctypes
libc = ctypes.PyDLL(None)          # PyDLL: the GIL stays held during the call
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
print("up", flush=True)
libc.pthread_mutex_lock(mutex)     # locks itself out, GIL held: the handler's thread never runs
"""
SECRET = "root-only-secret-7d1f"


@dataclass
class Job:
    proc: subprocess.Popen[str]
    user: User
    directory: Path

    def files(self) -> dict[str, str]:
        return runtime.files_of(str(self.directory), self.proc.pid)

    def as_user(self, code: str, *args: str) -> None:
        """Run Python ``code`` as the job's user (what that user can do to its own files)."""
        subprocess.run(self.user.argv(sys.executable, "-c", code, *args), check=True, timeout=60)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory the job's user can reach (pytest's tmp_path is root's, closed to others)."""
    path = Path(tempfile.mkdtemp(prefix="rankscope-hostile-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _start(user: User, workdir: Path, code: str) -> Job:
    home = workdir / user.name
    home.mkdir(exist_ok=True)
    os.chown(home, user.uid, user.gid)
    directory = home / "rt"
    env = {
        **{k: v for k, v in os.environ.items() if k != "RANKSCOPE_INPROC"},
        "RANKSCOPE_INPROC": "1",
        runtime.ENV_DIR: str(directory),
        "HOME": str(user.home),
        "RANK": "0",
    }
    proc = subprocess.Popen(
        user.argv(sys.executable, "-c", code),
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=workdir,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return Job(proc, user, directory)


@pytest.fixture
def job(job_user: User, workdir: Path) -> Iterator[Job]:  # noqa: F811 - the imported fixture
    started = _start(job_user, workdir, JOB)
    try:
        yield started
    finally:
        os.killpg(started.proc.pid, signal.SIGKILL)
        started.proc.wait()


def stacks(*args: str) -> subprocess.CompletedProcess[str]:
    # The subprocess timeout only guards the suite: a blocked open() would never return at all.
    return subprocess.run(
        [sys.executable, "-m", "rankscope", "stacks", *args], capture_output=True, text=True, timeout=120
    )


PLANT_FIFO = "import os, sys\nfor path in sys.argv[1:]:\n    os.unlink(path)\n    os.mkfifo(path, 0o600)\n"
PLANT_LINK = "import os, sys\nos.unlink(sys.argv[1])\nos.symlink(sys.argv[2], sys.argv[1])\n"


def test_untouched_job_shows_its_step_as_root(job: Job) -> None:
    """The baseline the planted files break: root reads the user's handler and marker."""
    out = stacks("--pid", str(job.proc.pid), "--via-signal", "--json", "--deadline", "10")
    assert out.returncode == 0, out.stderr
    (process,) = json.loads(out.stdout)["processes"]
    assert process["progress"]["step"] == 7 and process["via"] == "signal"


def test_planted_fifos_do_not_hold_roots_rankscope(job: Job) -> None:
    files = job.files()
    job.as_user(PLANT_FIFO, files["inproc"], files["progress"])
    out = stacks("--pid", str(job.proc.pid), "--via-signal", "--json", "--deadline", "10")
    assert out.returncode == 5, out.stderr  # its one target failed, with the reason
    (failure,) = json.loads(out.stdout)["failures"]
    assert "unreadable handler description" in failure["reason"]
    assert "not a regular file" in failure["reason"]
    # py-spy's way reads the progress marker: the FIFO there is skipped, the stacks are shown.
    pyspy = stacks("--pid", str(job.proc.pid), "--json", "--deadline", "10")
    assert pyspy.returncode == 0, pyspy.stderr
    (process,) = json.loads(pyspy.stdout)["processes"]
    assert "progress" not in process
    assert job.proc.poll() is None


def test_planted_links_are_not_followed(job: Job, workdir: Path) -> None:
    secret = workdir / "secret.json"
    secret.write_text(json.dumps({"base": SECRET, "version": 2, "kinds": ["stacks"], "pid": job.proc.pid}))
    secret.chmod(0o600)  # root's own
    files = job.files()
    job.as_user(PLANT_LINK, files["inproc"], str(secret))
    job.as_user(PLANT_LINK, files["progress"], str(secret))
    out = stacks("--pid", str(job.proc.pid), "--via-signal", "--json", "--deadline", "10")
    assert out.returncode == 5, out.stderr
    (failure,) = json.loads(out.stdout)["failures"]
    assert "unreadable handler description" in failure["reason"]
    assert SECRET not in out.stdout + out.stderr
    assert secret.read_text().startswith('{"base"')  # untouched


def _own_processes(pid: int) -> list[int]:
    """Processes of the session ``pid`` leads (what rankscope started), ``pid`` itself excluded."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pid:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == pid:  # its session
            found.append(int(entry))
    return found


def test_sigterm_ends_the_wait_at_once_and_leaves_nothing(job_user: User, workdir: Path) -> None:  # noqa: F811
    """A rank whose handler cannot answer (a thread holds the GIL): rankscope waits up to --timeout
    60; SIGTERM ends it at once with what it has, and it leaves no process and the job as it was."""
    holder = _start(job_user, workdir, HOLDS_GIL)
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "rankscope", "stacks", "--pid", str(holder.proc.pid), "--via-signal"]
            + ["--json", "--timeout", "60", "--deadline", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            # Mid-wait: the handler's thread has read the request (it no longer waits in the FIFO's
            # read) and now waits for the GIL it never gets.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any("pipe" in w for w in _wchans(holder.proc.pid)):
                time.sleep(0.05)
            assert not any("pipe" in w for w in _wchans(holder.proc.pid)), "rankscope never asked"
            run.send_signal(signal.SIGTERM)
            out, err = run.communicate(timeout=15)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        assert run.returncode == 143, err
        (failure,) = json.loads(out)["failures"]
        assert failure["stage"] == "interrupted" and "SIGTERM stopped the run" in failure["reason"]
        assert _own_processes(run.pid) == []
        assert holder.proc.poll() is None
        state = Path(f"/proc/{holder.proc.pid}/stat").read_text()
        assert state[state.rindex(")") + 2] in "SR"  # not left stopped or traced
    finally:
        os.killpg(holder.proc.pid, signal.SIGKILL)
        holder.proc.wait()


def _wchans(pid: int) -> list[str]:
    """Where in the kernel each thread of ``pid`` waits (``anon_pipe_read``, ``futex_do_wait`` ...)."""
    return [(task / "wchan").read_text() for task in Path(f"/proc/{pid}/task").iterdir()]

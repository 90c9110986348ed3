"""Progress markers: the file a real process writes, read after SIGKILL; the private directory; a cheap import."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rankscope.inproc import progress as progress_mod
from rankscope.inproc import runtime

MARKING = """
import sys, time
import rankscope
rankscope.progress(step=6, phase="forward", epoch=2)
rankscope.progress(step=7)                      # the labels stay
rankscope.progress(phase="backward", epoch=None)  # the step stays, epoch removed
print("marked", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _start(tmp_path: Path, env_extra: dict[str, str], seconds: float = 60) -> subprocess.Popen[str]:
    env = {**os.environ, **env_extra, "RANK": "5"}
    return subprocess.Popen(
        [sys.executable, "-c", MARKING, str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_marker_file_survives_sigkill_with_step_and_labels(tmp_path: Path) -> None:
    directory = tmp_path / "rt"
    proc = _start(tmp_path, {runtime.ENV_DIR: str(directory)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "marked"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    files = runtime.files_of(str(directory), proc.pid)
    assert set(files) == {"progress"}
    path = files["progress"]
    assert os.path.basename(path).endswith(f".rank-5.pid-{proc.pid}.progress")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    record = progress_mod.read(path)
    assert (record.pid, record.rank, record.step) == (proc.pid, 5, 7)
    assert record.labels == {"phase": "backward"}
    assert record.calls == 3
    assert record.updated >= record.created > 0


def test_normal_exit_removes_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "rt"
    proc = _start(tmp_path, {runtime.ENV_DIR: str(directory)}, seconds=0)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert os.listdir(directory) == []


def test_an_uncaught_exception_leaves_the_file_as_a_crash_does(tmp_path: Path) -> None:
    """A rank that dies of an exception its code did not catch exits with 1 through a normal interpreter
    exit; its launcher may reap it before anyone reads that code, so the marker is what says it died."""
    directory = tmp_path / "rt"
    raising = MARKING.replace("time.sleep(float(sys.argv[1]))", "raise RuntimeError('bad batch')")
    env = {**os.environ, runtime.ENV_DIR: str(directory), "RANK": "5"}
    proc = subprocess.Popen([sys.executable, "-c", raising], env=env, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "RuntimeError: bad batch" in err
    files = runtime.files_of(str(directory), proc.pid)
    assert set(files) == {"progress"}, os.listdir(directory)
    assert progress_mod.read(files["progress"]).step == 7


@pytest.mark.parametrize("case", ["symlink", "open-mode"])
def test_unsafe_directory_is_not_used_and_the_job_runs_on(tmp_path: Path, case: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    directory = tmp_path / "rt"
    if case == "symlink":
        directory.symlink_to(elsewhere)
    else:
        directory.mkdir()
        directory.chmod(0o755)
    proc = _start(tmp_path, {runtime.ENV_DIR: str(directory)}, seconds=0)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "marked"
    assert os.listdir(elsewhere) == []
    if case == "open-mode":
        assert os.listdir(directory) == []


def test_default_directory_follows_tmpdir_and_uid() -> None:
    assert runtime.runtime_dir({"TMPDIR": "/scratch"}, 1000) == "/scratch/rankscope-1000"
    assert runtime.runtime_dir({}, 0) == "/tmp/rankscope-0"
    assert runtime.runtime_dir({runtime.ENV_DIR: "/x/y", "TMPDIR": "/s"}, 7) == "/x/y"


def test_file_names_round_trip() -> None:
    assert runtime.parse_name(runtime.file_name("node-1.a", 42, "progress", 3)) == (
        "node-1.a",
        3,
        42,
        "progress",
    )
    assert runtime.parse_name(runtime.file_name("vm", 42, "stacks")) == ("vm", None, 42, "stacks")
    assert runtime.parse_name("vm.pid-12.ab12.reply") == ("vm", None, 12, "ab12.reply")
    assert runtime.parse_name("notes.txt") is None


@pytest.mark.parametrize("live_rank", [1, 5])
def test_a_reused_pids_earlier_file_gives_way_to_the_live_ones(tmp_path: Path, live_rank: int) -> None:
    """A killed rank's marker stays; its pid, reused by a rank of another job, then has two files of
    one kind. The one written last is the live process's, whatever order the directory lists them in."""
    pid = 4242
    earlier, live = (
        tmp_path / runtime.file_name("h", pid, "progress", r) for r in (6 - live_rank, live_rank)
    )
    for path, written in ((earlier, 1_000_000_000), (live, 2_000_000_000)):
        path.write_bytes(b"x")
        os.utime(path, ns=(written, written))
    assert runtime.files_of(str(tmp_path), pid, "h") == {"progress": str(live)}
    assert runtime.files_of_pids(str(tmp_path), [pid], "h") == {pid: {"progress": str(live)}}


def test_damaged_files_say_what_is_wrong(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"RSPROGR\0")
    with pytest.raises(ValueError, match="too short"):
        progress_mod.read(str(short))
    other = tmp_path / "other"
    other.write_bytes(b"x" * progress_mod.SIZE)
    with pytest.raises(ValueError, match="not a rankscope progress file"):
        progress_mod.read(str(other))
    newer = bytearray(progress_mod.SIZE)
    progress_mod.HEADER.pack_into(newer, 0, progress_mod.MAGIC, 2, progress_mod.SIZE, 1, 1, 0, 0.0)
    (tmp_path / "newer").write_bytes(bytes(newer))
    with pytest.raises(ValueError, match="version 2"):
        progress_mod.read(str(tmp_path / "newer"))


def test_import_is_cheap_and_the_name_becomes_a_plain_attribute() -> None:
    code = (
        "import sys, rankscope\n"
        "assert 'rankscope.inproc' not in sys.modules, 'import rankscope imported inproc'\n"
        "first = rankscope.progress\n"
        "assert rankscope.__dict__['progress'] is first\n"
        "assert not any(m in sys.modules for m in ('click', 'torch', 'rankscope.stacks', 'rankscope.model'))\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_failing_call_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.ENV_DIR, str(tmp_path / "rt"))
    writer = progress_mod._Writer()
    writer.mark(step=1)
    writer.mark(step="not a number")  # int() fails: the markers turn off, the job goes on
    writer.mark(step=3)
    assert writer.path is not None
    assert progress_mod.read(writer.path).step == 1
    writer.remove()
    assert os.listdir(tmp_path / "rt") == []

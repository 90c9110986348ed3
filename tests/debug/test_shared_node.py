"""Who may attach to a stopped rank, on a node shared with other users (two real unprivileged
users made by the ``local_users`` fixture; root runs the tests).

- The attach line and everything rankscope shares hold no secret: only the rank's user and root
  may attach (the kernel says who connects), another user is refused and cannot read a token.
- A slow client (one byte at a time) never holds the socket against the rank's user.
- ``attach --pid`` of a process with no breakpoint runs the target's interpreter as the target's
  user, in isolated mode (-I), never as root, even when root asks.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
from tests.support.cli import run_cli
from tests.support.users import LocalUser

from rankscope.debug import remote
from rankscope.demo.launch import kill_tree

ROOT = Path(__file__).parents[2]
#: The Python the test users run: the system's (the test's own lives under root's home, which they
#: cannot enter), with this checkout's sources and the test environment's packages.
USER_PYTHON = "/usr/bin/python3"
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
#: The program the rank's user runs: it stops itself (no RANK: a process alone), then goes on.
PROGRAM = "import rankscope\nrankscope.breakpoint()\nanswer = 6 * 7\nprint('went on', answer, flush=True)\n"
LINE = re.compile(r"rankscope: process (\d+) on (\S+) is stopped in pdb with no terminal; (attach .*)\n")

pytestmark = pytest.mark.skipif(not Path(USER_PYTHON).exists(), reason=f"no {USER_PYTHON}")


def _env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHELASTIC_", "SLURM_", "RANKSCOPE_", "OMPI_", "PMI", "RANK", "WORLD_SIZE"))
    }
    env.update(PYTHONPATH=f"{ROOT / 'src'}:{SITE}", **extra)
    return env


class Stopped:
    """A process of ``user`` (root when ``None``) stopped in rankscope.breakpoint() with no terminal."""

    def __init__(self, user: Optional[LocalUser], **extra: str) -> None:
        env = _env(**extra)
        kwargs = user.popen_kwargs(env) if user is not None else {"env": env}
        self.process = subprocess.Popen(
            [USER_PYTHON, "-c", PROGRAM],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kwargs,
        )
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.readline()
        found = LINE.fullmatch(self.stderr)
        assert found is not None and found[1] == str(self.process.pid), self.stderr
        self.pid = self.process.pid
        self.how = found[3]

    def finish(self) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, self.stderr + err


@pytest.fixture
def stopped() -> Iterator[list[Stopped]]:
    """Stopped processes started by the test; each one's group is killed in teardown."""
    started: list[Stopped] = []
    yield started
    for each in started:
        kill_tree(each.process, grace=1.0)


def _as(user: LocalUser, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``rankscope ARGS`` run by ``user``, typing ``stdin`` (no terminal: one line per prompt)."""
    return subprocess.run(
        [USER_PYTHON, "-m", "rankscope", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        **user.popen_kwargs(_env()),
    )


_RAW_CLIENT = """
import socket, sys
pid = sys.argv[1]
with open("/proc/net/unix") as table:  # readable by every user
    names = [row.split()[7][1:] for row in table if f" @rankscope-pdb-{pid}-" in row]
conn = socket.socket(socket.AF_UNIX)
conn.settimeout(10)
conn.connect("\\0" + names[0])
try:
    conn.sendall(b"RANKSCOPE-ATTACH 1\\n")
except OSError:
    pass
answer = b""
while True:
    try:
        chunk = conn.recv(4096)
    except OSError:
        break
    if not chunk:
        break
    answer += chunk
print(answer.decode(), end="")
"""


def test_only_the_ranks_user_and_root_may_attach(
    local_users: tuple[LocalUser, LocalUser], stopped: list[Stopped]
) -> None:
    owner, other = local_users
    stopped.append(Stopped(owner))
    rank = stopped[-1]
    node = socket.gethostname()
    assert rank.how == f"attach on {node} with: rankscope attach --pid {rank.pid}"  # nothing secret

    refused = _as(other, "attach", "--pid", str(rank.pid))
    assert refused.returncode == 7
    assert refused.stderr == (
        f"rankscope: error: process {rank.pid} belongs to another user — only its user and root may attach to it\n"
    )
    # The socket's name is public (/proc/net/unix); connecting straight to it is refused by the rank.
    raw = subprocess.run(
        [USER_PYTHON, "-c", _RAW_CLIENT, str(rank.pid)],
        capture_output=True,
        text=True,
        timeout=60,
        **other.popen_kwargs(_env()),
    )
    assert (raw.returncode, raw.stdout) == (0, f"{remote.NOT_YOURS}\n"), raw.stderr
    assert rank.process.poll() is None  # still stopped, waiting for its user

    session = _as(
        owner,
        "attach",
        "--pid",
        str(rank.pid),
        stdin="p answer if 'answer' in dir() else 'not yet'\nn\np answer\nc\n",
    )
    assert session.returncode == 0, session.stderr
    assert "(Pdb) 'not yet'\n" in session.stdout and "(Pdb) 42\n" in session.stdout
    code, out, err = rank.finish()
    assert (code, out) == (0, "went on 42\n"), err


def test_a_tcp_rank_keeps_its_token_in_a_file_only_its_user_reads(
    local_users: tuple[LocalUser, LocalUser], stopped: list[Stopped]
) -> None:
    owner, other = local_users
    stopped.append(Stopped(owner, RANKSCOPE_BREAKPOINT_HOST="127.0.0.1"))
    rank = stopped[-1]
    found = re.fullmatch(
        r"attach with: rankscope attach (127\.0\.0\.1:\d+) --token-file (\S+) "
        r"\(a file on \S+ that only you and root can read\)",
        rank.how,
    )
    assert found is not None, rank.how
    address, token_file = found[1], Path(found[2])
    info = token_file.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (owner.uid, 0o600)
    token = token_file.read_text().strip()
    assert len(token) >= 22 and token not in rank.stderr  # 128 bits, never in the job's log

    cannot_read = _as(other, "attach", address, "--token-file", str(token_file))
    assert cannot_read.returncode == 7
    assert cannot_read.stderr == (
        f"rankscope: error: cannot read {token_file}: permission denied — "
        "only the rank's user and root may attach to it\n"
    )
    guessed = _as(other, "attach", address, "--token", "x" * 22)
    assert guessed.returncode == 7 and "refused the token" in guessed.stderr

    session = _as(owner, "attach", address, "--token-file", str(token_file), stdin="c\n")
    assert session.returncode == 0, session.stderr
    code, out, err = rank.finish()
    assert (code, out) == (0, "went on 42\n"), err
    assert not token_file.exists()  # removed when the session ended


class SlowClient(threading.Thread):
    """Connects, then sends its hello one byte a second, for as long as the rank lets it."""

    def __init__(self, connect: socket.socket, address: object) -> None:
        super().__init__(daemon=True)
        self.conn = connect
        self.conn.connect(address)  # type: ignore[arg-type]
        self.sent = 0
        self.cut_off = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        for byte in b"RANKSCOPE-ATTACH 1 and a token that never ends":
            try:
                self.conn.send(bytes([byte]))
            except OSError:
                self.cut_off.set()
                return
            self.sent += 1
            if self.stop.wait(1.0):
                return
        self.conn.settimeout(5)
        try:
            if self.conn.recv(1) == b"":
                self.cut_off.set()
        except OSError:
            self.cut_off.set()


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_a_slow_client_never_holds_the_socket(kind: str, stopped: list[Stopped]) -> None:
    extra = {"RANKSCOPE_BREAKPOINT_HOST": "127.0.0.1"} if kind == "tcp" else {}
    stopped.append(Stopped(None, **extra))
    rank = stopped[-1]
    if kind == "tcp":
        found = re.search(r"rankscope attach 127\.0\.0\.1:(\d+) --token-file (\S+)", rank.how)
        assert found is not None, rank.how
        slow = SlowClient(socket.socket(), ("127.0.0.1", int(found[1])))
        attach_args = [f"127.0.0.1:{found[1]}", "--token-file", found[2]]
    else:
        with open("/proc/net/unix") as table:
            (name,) = [row.split()[7][1:] for row in table if f" @rankscope-pdb-{rank.pid}-" in row]
        slow = SlowClient(socket.socket(socket.AF_UNIX), "\0" + name)
        attach_args = ["--pid", str(rank.pid)]
    slow.start()
    try:
        # The rank's user attaches while the slow client is still sending, and is answered.
        session = run_cli(
            "attach",
            *attach_args,
            "--timeout",
            "3",
            input="p answer if 'answer' in dir() else 0\nc\n",
            timeout=60,
        )
        assert session.returncode == 0, session.stderr
        code, out, err = rank.finish()
        assert (code, out) == (0, "went on 42\n"), err
    finally:
        slow.stop.set()
        slow.join(timeout=60)
        slow.conn.close()


def test_a_crowd_of_wrong_tokens_never_keeps_the_owner_waiting(stopped: list[Stopped]) -> None:
    stopped.append(Stopped(None, RANKSCOPE_BREAKPOINT_HOST="127.0.0.1"))
    rank = stopped[-1]
    found = re.search(r"rankscope attach 127\.0\.0\.1:(\d+) --token-file (\S+)", rank.how)
    assert found is not None, rank.how
    guessers = []
    for guess in range(20):  # answered half a second apart: 10 s of refusals queued
        guesser = socket.create_connection(("127.0.0.1", int(found[1])), timeout=60)
        guesser.sendall(f"{remote.HELLO} wrong-{guess}\n".encode())
        guessers.append(guesser)
    try:
        session = run_cli(
            "attach",
            f"127.0.0.1:{found[1]}",
            "--token-file",
            found[2],
            "--timeout",
            "3",
            input="c\n",
            timeout=60,
        )
        assert session.returncode == 0, session.stderr
        assert (rank.finish()[:2]) == (0, "went on 42\n")
        # None got in: each was refused (the last ones when the session began), or closed unread.
        answers = [guesser.recv(100) for guesser in guessers]
        assert set(answers) <= {f"{remote.REFUSED}\n".encode(), b""} and answers[0], answers
    finally:
        for guesser in guessers:
            guesser.close()


def test_a_slow_hello_is_cut_off_at_one_deadline(stopped: list[Stopped]) -> None:
    stopped.append(Stopped(None))
    rank = stopped[-1]
    with open("/proc/net/unix") as table:
        (name,) = [row.split()[7][1:] for row in table if f" @rankscope-pdb-{rank.pid}-" in row]
    slow = SlowClient(socket.socket(socket.AF_UNIX), "\0" + name)
    slow.start()
    slow.join(timeout=120)
    # One byte a second, each in time for a per-byte timeout: the whole hello's deadline ends it.
    assert slow.cut_off.is_set()
    assert slow.sent < len("RANKSCOPE-ATTACH 1 and a token that never ends")
    slow.conn.close()


FAKE_PYTHON = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Stands in for an interpreter the user controls: it notes who ran it, with which arguments. */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "serve") == 0) {
        pause();
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.ran", argv[0]);
    FILE *note = fopen(path, "a");
    if (note != NULL) {
        fprintf(note, "uid=%d euid=%d", (int)getuid(), (int)geteuid());
        for (int i = 1; i < argc; i++) fprintf(note, " %s", argv[i]);
        fprintf(note, "\n");
        fclose(note);
    }
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-c") == 0) puts("3 14");
    return 0;
}
"""


@pytest.mark.needs("gcc")
@pytest.mark.parametrize("name", ["python3.14", "python3"])
def test_attach_pid_runs_the_targets_interpreter_as_its_user_never_as_root(
    name: str, local_users: tuple[LocalUser, LocalUser]
) -> None:
    owner, _ = local_users
    home = Path(tempfile.mkdtemp(prefix="attach-", dir=owner.home))
    worker: Optional[subprocess.Popen[bytes]] = None
    try:
        source = home / "fake.c"
        source.write_text(FAKE_PYTHON)
        fake = home / name  # the version from its name (python3.14), or asked (python3)
        subprocess.run(["gcc", "-O0", "-o", str(fake), str(source)], check=True, timeout=120)
        for path in (home, source, fake):
            os.chown(path, owner.uid, owner.gid)
        worker = subprocess.Popen([str(fake), "serve"], start_new_session=True, **owner.popen_kwargs(_env()))
        out = run_cli("attach", "--pid", str(worker.pid), timeout=60)  # as root
        assert out.returncode == 0, out.stderr
        ran = Path(f"{fake}.ran").read_text().splitlines()
        expected = [f"uid={owner.uid} euid={owner.uid} -I -m pdb -p {worker.pid}"]
        if name == "python3":
            expected.insert(
                0, f"uid={owner.uid} euid={owner.uid} -I -c import sys; print(*sys.version_info[:2])"
            )
        assert ran == expected
    finally:
        if worker is not None:
            kill_tree(worker, grace=1.0)
        shutil.rmtree(home, ignore_errors=True)


_HOSTILE_RANK = """
import os, socket
listener = socket.socket(socket.AF_UNIX)
listener.bind(f"\\0rankscope-pdb-{os.getpid()}-fake")
listener.listen(1)
print("listening", flush=True)
conn, _ = listener.accept()
conn.recv(100)
conn.sendall(b"OK rank 0 pid 1\\n\\x1b]0;retitled\\x07\\x1b[2Jcleared\\n\\x9b6n(Pdb) \\x00")
conn.recv(100)
"""


def test_a_process_cannot_drive_the_terminal_of_whoever_attaches(
    local_users: tuple[LocalUser, LocalUser],
) -> None:
    owner, _ = local_users
    hostile = subprocess.Popen(
        [USER_PYTHON, "-c", _HOSTILE_RANK],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **owner.popen_kwargs(_env()),
    )
    try:
        assert hostile.stdout is not None and hostile.stdout.readline() == "listening\n"
        out = run_cli("attach", "--pid", str(hostile.pid), input="c\n", timeout=60)  # as root
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\x9b" not in out.stdout and "\x07" not in out.stdout
        assert out.stdout.startswith("^[]0;retitled^G^[[2Jcleared\n\ufffd6n(Pdb) ")
    finally:
        kill_tree(hostile, grace=1.0)

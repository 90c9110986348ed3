"""Everything rankscope reads from /proc, in one place.

The process table (one pass over /proc/*/stat), a process's stat fields (comm, state, ppid),
status fields (TracerPid, CapEff), environment, command line, executable, owner, the one rule
for "is this a Python process", the yama ptrace scope, and a process's open descriptors
(fd links, fdinfo, the socket tables of its own network namespace, its open-files limit).
Callers get data or ``None``; nothing here raises for a process that is gone, except
:func:`environ` and :func:`fd_links`, whose callers tell "no such process" from "permission
denied".

Job discovery (launchers, workers, ranks) lives in rankscope.procs; this module knows only
the kernel's files. It imports nothing but ``os`` and ``errno``: rankscope.ranks, which runs
inside training processes (Python 3.9, standard library only), reads environments through it.

Direct reads, not psutil. Measured with bench/bench_procfs.py on a shared 2-core VM (minimum
of 15 to 21 fresh interpreters; ~110 processes, and ~1,100 in brackets):

- ``import psutil``: 27 ms in a fresh interpreter, still 16 ms after the modules a
  `rankscope stacks` run imports anyway; ``import rankscope.procfs``: 0.8 ms. The whole
  stacks run over 16 ranks takes ~0.15 s on this VM (docs/benchmarks.md), and its target is
  to be no slower than ``pgrep | xargs py-spy dump``.
- One pass over the table (pid, ppid, comm): 2 ms against 12 to 15 ms with
  ``psutil.process_iter(["pid", "ppid", "name"])`` [17 ms against 119 ms].
- That pass plus each Python process's command line and environment (what discovery
  reads): 3 ms against 16 ms [18 ms against 127 ms].

psutil's portability buys nothing here (py-spy targets are Linux processes), and it would be
imported on the path whose start-up time is the product. Files are read with os.open/os.read,
half the cost of open() for these small files. /proc/PID/maps is the dear one (45 µs for a
small process), hence read only when a process's names say nothing.
"""

from __future__ import annotations

import errno
import os

#: typing costs milliseconds to import; the annotations do not need it at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Optional, Union

    #: A pid, or "self" for the calling process.
    Pid = Union[int, str]

#: Names (comm, executable, argv[0]) of a Python interpreter start with one of these.
PYTHON_NAMES = ("python", "pypy")
#: In /proc/PID/maps, the mark of an interpreter whose names say nothing: a libpython an
#: embedding program links (uwsgi, a C++ host), or a renamed static build's own library paths.
_PYTHON_MAPPINGS = (b"libpython", b"libpypy", b"python3")
_CAP_SYS_PTRACE = 19
_YAMA_PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def _read(pid: Pid, name: str) -> bytes:
    # os.open/os.read: half the cost of open() for these small files, which a table pass reads by the hundred.
    fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _read_stat(pid: int) -> bytes:
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        return os.read(fd, 4096)  # one line, well under 4 KiB: one read returns it whole
    finally:
        os.close(fd)


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


class ProcfsEntry:
    """One process as /proc shows it: stat's fields read at once, everything else on first use and kept.

    Not to be confused with the stacks report's ``ProcessInfo``, which says what a dump found.
    """

    __slots__ = (
        "pid",
        "comm",
        "state",
        "ppid",
        "_cmdline",
        "_exe",
        "_environ_raw",
        "_environ",
        "_environ_denied",
        "_uid",
        "_python",
        "_known",
    )

    def __init__(self, pid: int, comm: str, state: str, ppid: int) -> None:
        self.pid = pid
        #: The kernel's 15-character process name (a thread may rename it: torch's pt_main_thread).
        self.comm = comm
        #: The scheduler state letter: R, S, D, T (stopped), t (traced), Z (zombie), X ...
        self.state = state
        self.ppid = ppid
        self._cmdline: Optional[list[str]] = None
        self._exe: Optional[str] = None
        self._environ_raw: Optional[bytes] = None
        self._environ: Optional[dict[str, str]] = None
        self._environ_denied = False
        self._uid: Optional[int] = None
        self._python: Optional[bool] = None
        #: Which of the optional fields above have been read (None is a valid answer for them).
        self._known: set[str] = set()

    def __repr__(self) -> str:
        return f"ProcfsEntry(pid={self.pid}, comm={self.comm!r}, state={self.state!r}, ppid={self.ppid})"

    @property
    def cmdline(self) -> list[str]:
        if self._cmdline is None:
            self._cmdline = cmdline(self.pid)
        return self._cmdline

    @property
    def exe(self) -> str:
        if self._exe is None:
            self._exe = exe(self.pid)
        return self._exe

    @property
    def command(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def environ(self) -> Optional[dict[str, str]]:
        """The process's start-up environment; ``None`` when it cannot be read (gone, another user's)."""
        raw = self._raw_environ()
        if self._environ is None and raw is not None:
            self._environ = parse_environ(raw)
        return self._environ

    def variable(self, name: str) -> Optional[str]:
        """One variable of the start-up environment, found without parsing the rest of it.

        Discovery asks every process for a few names; parsing whole environments would cost
        more than the rest of the table pass.
        """
        raw = self._raw_environ()
        if not raw:
            return None
        key = name.encode() + b"="
        if raw.startswith(key):
            start = len(key)
        else:
            found = raw.find(b"\0" + key)
            if found < 0:
                return None
            start = found + 1 + len(key)
        end = raw.find(b"\0", start)
        return raw[start : end if end >= 0 else len(raw)].decode("utf-8", "replace")

    def variables(self, names: Iterable[str]) -> Optional[dict[str, str]]:
        """Those of ``names`` the start-up environment sets; ``None`` when it cannot be read."""
        if not self._raw_environ():
            return None
        found = {name: self.variable(name) for name in names}
        return {name: value for name, value in found.items() if value is not None}

    def _raw_environ(self) -> Optional[bytes]:
        if "environ" not in self._known:
            self._known.add("environ")
            try:
                self._environ_raw = environ_bytes(self.pid)
            except PermissionError:
                self._environ_denied = True
            except OSError:
                self._environ_raw = None
        return self._environ_raw

    @property
    def environ_denied(self) -> bool:
        """Whether /proc/PID/environ exists but this user may not read it (another user's process)."""
        self._raw_environ()
        return self._environ_denied

    @property
    def uid(self) -> Optional[int]:
        if "uid" not in self._known:
            self._known.add("uid")
            self._uid = uid(self.pid)
        return self._uid

    @property
    def is_python(self) -> Optional[bool]:
        """Whether this is a Python interpreter; ``None`` when nothing readable says either way.

        Its names decide first (comm, executable, argv[0]: python*, pypy*). Only when none of
        them does, /proc/PID/maps decides: an interpreter library mapped means an embedded
        or renamed interpreter. Unreadable maps (another user's process) leave it unknown.
        """
        if "python" not in self._known:
            self._known.add("python")
            self._python = (
                self.comm.startswith(PYTHON_NAMES)  # each name is read only if the one before says nothing
                or _basename(self.exe).startswith(PYTHON_NAMES)
                or (bool(self.cmdline) and _basename(self.cmdline[0]).startswith(PYTHON_NAMES))
                or maps_python(self.pid)
            )
        return self._python


def process(pid: int) -> Optional[ProcfsEntry]:
    """A process's /proc/PID/stat fields as a :class:`ProcfsEntry`; ``None`` when it is gone."""
    try:
        stat = _read_stat(pid)
    except OSError:
        return None
    # comm may hold spaces and parentheses: it runs from the first "(" to the last ")".
    open_paren, close_paren = stat.find(b"("), stat.rfind(b")")
    fields = stat[close_paren + 2 :].split()
    try:
        return ProcfsEntry(
            pid,
            stat[open_paren + 1 : close_paren].decode("utf-8", "replace"),
            fields[0].decode("ascii", "replace"),
            int(fields[1]),
        )
    except (IndexError, ValueError):
        return None


def table() -> dict[int, ProcfsEntry]:
    """Every process on this node, from one pass over /proc (stat only; the rest is read on demand)."""
    procs = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                found = process(int(entry.name))
                if found is not None:
                    procs[found.pid] = found
    return procs


def self_and_ancestors(procs: dict[int, ProcfsEntry]) -> set[int]:
    """The calling process and its ancestors in ``procs``: rankscope never targets its own chain."""
    pids = set()
    pid = os.getpid()
    while pid and pid not in pids:
        pids.add(pid)
        found = procs.get(pid)
        pid = found.ppid if found else 0
    return pids


def cmdline(pid: int) -> list[str]:
    """argv of a process; ``[]`` for a kernel thread, a zombie, or one that cannot be read."""
    try:
        raw = _read(pid, "cmdline")
    except OSError:
        return []
    return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]


def exe(pid: int) -> str:
    """The executable's path; ``""`` when unreadable (another user's process, a kernel thread)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def cwd(pid: Pid) -> Optional[str]:
    """The process's working directory; ``None`` when it is gone or not ours to read."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def environ(pid: Pid) -> dict[str, str]:
    """The environment a process was started with, from /proc/PID/environ.

    Raises ``FileNotFoundError`` when the process is gone (a zombie too: the kernel answers
    ESRCH for it), ``PermissionError`` for another user's process.
    """
    return parse_environ(environ_bytes(pid))


def environ_bytes(pid: Pid) -> bytes:
    """/proc/PID/environ as it is (NUL-separated ``NAME=value``); raises as :func:`environ` does."""
    try:
        return _read(pid, "environ")
    except ProcessLookupError as exc:
        raise FileNotFoundError(errno.ENOENT, "the process has exited", exc.filename) from None


def parse_environ(raw: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def uid(pid: int) -> Optional[int]:
    """The owner of /proc/PID (the process's effective uid; root for a non-dumpable one)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def status_field(pid: Pid, name: str) -> Optional[str]:
    """One field of /proc/PID/status (``TracerPid``, ``CapEff`` ...); ``None`` when unreadable."""
    prefix = name.encode() + b":"
    try:
        for line in _read(pid, "status").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip().decode("ascii", "replace")
    except OSError:
        pass
    return None


def tracer_pid(pid: int) -> int:
    """The pid of whoever ptrace-attached the process (py-spy, gdb); 0 when none or unknown."""
    value = status_field(pid, "TracerPid")
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def has_cap_sys_ptrace() -> bool:
    """Whether the calling process may ptrace others regardless of yama (CAP_SYS_PTRACE in CapEff)."""
    return capeff_has_sys_ptrace(status_field("self", "CapEff"))


def capeff_has_sys_ptrace(capeff: Optional[str]) -> bool:
    """Whether a CapEff value of /proc/PID/status (hexadecimal) holds CAP_SYS_PTRACE."""
    try:
        return bool(int(capeff, 16) >> _CAP_SYS_PTRACE & 1) if capeff else False
    except ValueError:
        return False


def yama_ptrace_scope() -> Optional[int]:
    """kernel.yama.ptrace_scope (0 classic, 1 parents only, 2 admin only, 3 none); ``None`` without yama."""
    try:
        with open(_YAMA_PTRACE_SCOPE, "rb") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def core_pattern() -> Optional[str]:
    """kernel.core_pattern (where and how this node writes cores), stripped; ``None`` when unreadable."""
    try:
        with open("/proc/sys/kernel/core_pattern", "rb") as handle:
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return None


def maps_python(pid: int) -> Optional[bool]:
    """Whether a Python interpreter library is mapped into the process; ``None`` when maps is unreadable."""
    return maps_any(pid, _PYTHON_MAPPINGS)


def maps_any(pid: int, marks: tuple[bytes, ...]) -> Optional[bool]:
    """Whether any of ``marks`` is in the process's /proc/PID/maps (a library's name, say); ``None`` when
    maps is unreadable."""
    try:
        maps = _read(pid, "maps")
    except OSError:
        return None
    return any(mark in maps for mark in marks)


def stat_fields(pid: Pid) -> Optional[list[str]]:
    """The fields of /proc/PID/stat after the command name: state first (field 3), then ppid ...;
    ``exit_code`` (field 52, waitpid's status of a zombie) is at index 49. None when unreadable."""
    try:
        raw = _read(pid, "stat")
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def start_ticks(pid: Pid = "self") -> int:
    """The process's start in clock ticks after boot (starttime, field 22): with the pid, it tells a
    reused pid apart. 0 when /proc does not say."""
    try:
        return int((stat_fields(pid) or [])[19])
    except (IndexError, ValueError):
        return 0


def started_after_boot(pid: Pid = "self") -> Optional[float]:
    """Seconds from boot to the process's start (starttime in /proc/PID/stat, to 1/CLK_TCK: 10 ms).

    Against ``time.clock_gettime(time.CLOCK_BOOTTIME)`` it says how long the process has run.
    """
    ticks = start_ticks(pid)
    return ticks / os.sysconf("SC_CLK_TCK") if ticks else None


def boot_time() -> Optional[int]:
    """When this node booted, in whole seconds since the epoch (``btime`` of /proc/stat); None when unread."""
    try:
        with open("/proc/stat", "rb") as handle:
            return next((int(line.split()[1]) for line in handle if line.startswith(b"btime ")), None)
    except (OSError, ValueError, IndexError):
        return None


def thread_cpu(pid: Pid, tid: int) -> Optional[float]:
    """CPU seconds (user and system: utime and stime, fields 14-15) a thread has used; None when unread."""
    stat = task_file(pid, tid, "stat")
    if stat is None:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def task_file(pid: Pid, tid: int, name: str) -> Optional[str]:
    """/proc/PID/task/TID/NAME (``comm``, ``wchan`` ...), stripped; None when the thread ended or it is not ours."""
    try:
        return _read(pid, f"task/{tid}/{name}").decode("utf-8", "replace").strip()
    except OSError:
        return None


def pid_namespace() -> int:
    """The inode of this process's pid namespace (0 when unknown): pids mean something only inside it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def fd_links(pid: Pid) -> list[tuple[int, str]]:
    """(fd, what /proc/PID/fd/FD links to) for every open descriptor, by fd number.

    Raises ``FileNotFoundError`` when the process is gone, ``PermissionError`` for another
    user's process. A descriptor closed between the listing and its readlink is left out.
    """
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except ProcessLookupError as exc:
        raise FileNotFoundError(errno.ENOENT, "the process has exited", exc.filename) from None
    links = []
    for name in names:
        try:
            links.append((int(name), os.readlink(f"/proc/{pid}/fd/{name}")))
        except (OSError, ValueError):
            continue
    links.sort()
    return links


def fd_file(pid: Pid, fd: int) -> Optional[tuple[str, os.stat_result]]:
    """(what /proc/PID/fd/FD links to, the file's stat) when the descriptor is a regular file (never a
    pipe, socket or terminal); None otherwise, or when it is closed, gone or not ours to read."""
    link = f"/proc/{pid}/fd/{fd}"
    try:
        st = os.stat(link)
        target = os.readlink(link)
    except OSError:
        return None
    return (target, st) if st.st_mode & 0o170000 == 0o100000 else None  # S_ISREG


def fdinfo(pid: Pid, fd: int) -> list[str]:
    """The lines of /proc/PID/fdinfo/FD (``pos:``, ``flags:`` (octal), an epoll's ``tfd:`` lines ...); ``[]`` when gone."""
    try:
        return _read(pid, f"fdinfo/{fd}").decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def net_table(pid: Pid, name: str) -> str:
    """/proc/PID/net/NAME (tcp, tcp6, udp, udp6, unix): the sockets of the process's own network namespace.

    ``""`` when unreadable (no IPv6, the process gone).
    """
    try:
        return _read(pid, f"net/{name}").decode("utf-8", "replace")
    except OSError:
        return ""


def open_files_limit(pid: Pid) -> tuple[Optional[int], Optional[int]]:
    """(soft, hard) "Max open files" of /proc/PID/limits; ``None`` for unlimited or unreadable."""
    try:
        text = _read(pid, "limits").decode("ascii", "replace")
    except OSError:
        return None, None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            fields = line[len("Max open files") :].split()
            return _limit(fields[0]) if fields else None, _limit(fields[1]) if len(fields) > 1 else None
    return None, None


def _limit(value: str) -> Optional[int]:
    return int(value) if value.isdigit() else None


def ns_pids(pid: int) -> list[int]:
    """The pids of a process in each pid namespace, outermost first (``NSpid`` of /proc/PID/status).

    A process in a container's pid namespace has two or more: the last is the pid it has inside the
    container. Empty when unreadable or on a kernel without the field.
    """
    value = status_field(pid, "NSpid")
    try:
        return [int(part) for part in value.split()] if value else []
    except ValueError:
        return []

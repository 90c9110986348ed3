"""`rankscope core list`: core files on this node, newest first, each described by its own notes.

Where to look: the directories given, else the working directory, the core_pattern's directory,
/var/crash and /var/lib/apport/coredump; plus what systemd-coredump holds (`coredumpctl list
--json=short`, with a deadline). A file is a core when it starts with the ELF magic and says it is
of type ET_CORE (18 bytes read), whatever its name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from stat import S_ISREG
from typing import ClassVar, Optional

from rankscope import lifetime, procfs
from rankscope.core.notes import CoreNotes, NotACoreError, read_notes
from rankscope.serial import OMIT_NONE

SYSTEM_PLACES = ("/var/crash", "/var/lib/apport/coredump")
COREDUMPCTL_TIMEOUT = 10.0


@dataclass
class FoundCore:
    """One core (or a crash record of apport / systemd-coredump) found on this node."""

    path: str
    mtime: float = field(metadata={"round": 3})
    size: int
    pid: Optional[int] = None
    executable: Optional[str] = None
    signal: Optional[str] = None
    #: The rank the launcher gave the process, when its environment says.
    rank: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: Where it came from: a directory scan, apport, coredumpctl.
    source: str = "file"
    #: Why its notes could not be read, or how to get the core out (apport, coredumpctl).
    note: Optional[str] = field(default=None, metadata=OMIT_NONE)


@dataclass
class CoreList:
    SCHEMA: ClassVar[str] = "rankscope.core.list/1"

    places: list[str]
    cores: list[FoundCore]


def is_core(path: str) -> bool:
    """Does ``path`` start like a core? Opened without blocking or following a link (a FIFO or a
    link swapped in after the directory was listed is "no", never a hang)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not S_ISREG(os.fstat(fd).st_mode):  # before open(): a directory's fd raises there
            return False
        head = os.read(fd, 18)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(head) == 18 and head[:4] == b"\x7fELF" and head[5] == 1 and head[16] == 4


def pattern_directory(pattern: Optional[str]) -> Optional[str]:
    if pattern and pattern.startswith("/"):
        return pattern.rsplit("/", 1)[0] or "/"
    return None


def default_places(pattern: Optional[str], cwd: str) -> list[str]:
    places = [cwd]
    directory = pattern_directory(pattern)
    if directory:
        places.append(directory)
    places.extend(SYSTEM_PLACES)
    seen: dict[str, None] = {}
    for place in places:
        seen.setdefault(os.path.realpath(place))
    return list(seen)


def places_to_look(dirs: Sequence[str]) -> list[str]:
    """The directories `core list` reads: those named (each must exist), else :func:`default_places`
    for this node's kernel.core_pattern and working directory."""
    from rankscope.errors import BadInputError

    for directory in dirs:
        if not os.path.isdir(directory):
            raise BadInputError(f"{directory}: no such directory", "pass directories that hold core files")
    if dirs:
        return list(dirs)
    return default_places(procfs.core_pattern(), os.getcwd())


def overwritten(name: str, pid: Optional[int], rank: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """When a job's ranks share this core's file name, what was lost (pure: the name and the core's notes).

    A name without the crashing pid (kernel.core_pattern without %p, core_uses_pid=0) is the same
    for every rank that crashed in the directory: the kernel overwrote each earlier core with the next.
    """
    world = env.get("WORLD_SIZE") or env.get("SLURM_NTASKS") or env.get("OMPI_COMM_WORLD_SIZE")
    if pid is None or str(pid) in name or not world or not world.isdigit() or int(world) < 2:
        return None
    who = f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"
    return (
        f"one file for all {world} ranks of this job (its name has no pid): this core is {who}'s, "
        "the last to crash here; the cores of ranks that crashed here before it were overwritten "
        "(put %p in kernel.core_pattern or set kernel.core_uses_pid=1; see rankscope core check)"
    )


def _from_notes(notes: CoreNotes) -> FoundCore:
    rank = notes.env.get("RANK") or notes.env.get("SLURM_PROCID") or notes.env.get("OMPI_COMM_WORLD_RANK")
    lost = overwritten(os.path.basename(notes.path), notes.pid, rank, notes.env)
    truncated = "truncated: frames in the missing memory show as ??" if notes.truncated else None
    return FoundCore(
        path=notes.path,
        mtime=notes.mtime,
        size=notes.size,
        pid=notes.pid,
        executable=notes.executable or notes.program,
        signal="none (gcore)" if notes.written_by_gcore else notes.signal_name,
        rank=rank,
        note="; ".join(note for note in (truncated, lost) if note) or None,
    )


def scan(directory: str) -> list[FoundCore]:
    found = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            stat = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.endswith(".crash") and directory.startswith("/var/crash"):
            found.append(
                FoundCore(
                    entry.path,
                    stat.st_mtime,
                    stat.st_size,
                    source="apport",
                    note=f"an apport report: apport-unpack {entry.path} DIR writes DIR/CoreDump",
                )
            )
            continue
        if not is_core(entry.path):
            continue
        try:
            found.append(_from_notes(read_notes(entry.path)))
        except (NotACoreError, OSError) as exc:
            found.append(FoundCore(entry.path, stat.st_mtime, stat.st_size, note=str(exc)))
    return found


def coredumpctl(timeout: float = COREDUMPCTL_TIMEOUT) -> list[FoundCore]:
    """What systemd-coredump keeps (nothing where coredumpctl is not installed or has none)."""
    tool = shutil.which("coredumpctl")
    if tool is None:
        return []
    child = lifetime.run([tool, "list", "--json=short", "--no-pager"], timeout, stderr=subprocess.DEVNULL)
    if child.timed_out:
        return []
    out = child.output.bytes() if child.output is not None else b""
    try:
        entries = json.loads(out or b"[]")
    except ValueError:
        return []
    found = []
    for entry in entries if isinstance(entries, list) else []:
        pid = entry.get("pid")
        found.append(
            FoundCore(
                path=entry.get("exe", "?"),
                mtime=entry.get("time", 0) / 1e6,
                size=entry.get("size") or 0,
                pid=pid,
                executable=entry.get("exe"),
                signal=entry.get("sig") if isinstance(entry.get("sig"), str) else None,
                source="coredumpctl",
                note=f"coredumpctl dump {pid} -o core.{pid} writes it out"
                if entry.get("corefile") == "present"
                else f"core {entry.get('corefile', 'missing')}",
            )
        )
    return found


def list_cores(places: list[str], with_coredumpctl: bool = True) -> CoreList:
    cores = [core for place in places for core in scan(place)]
    if with_coredumpctl:
        cores.extend(coredumpctl())
    cores.sort(key=lambda core: -core.mtime)
    return CoreList(places, cores)

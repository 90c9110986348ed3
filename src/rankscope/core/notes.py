"""What a core file says about itself, from its ELF notes (no gdb needed): pid, program, signal, threads.

A core is an ELF file of type ET_CORE. Its PT_NOTE segment holds, per thread, an NT_PRSTATUS
note (the first one is the thread that received the signal: the kernel writes the dumping thread
first), one NT_PRPSINFO (pid, the 16-byte program name, the first 80 bytes of the command line),
NT_AUXV (AT_EXECFN: the path given to exec; AT_PHDR: where the executable's program headers are
mapped) and NT_FILE (every mapped file with its address range). The executable is the NT_FILE
mapping that holds AT_PHDR; the launcher's rank variables are read from the environment strings on
the stack, which end right before the AT_EXECFN string.

Only 64-bit little-endian cores (x86_64, aarch64) are read; the layouts below are the kernel's
``struct elf_prstatus`` / ``struct elf_prpsinfo`` for those. Standard library only.
"""

from __future__ import annotations

import os
import signal
import struct
from dataclasses import dataclass, field
from stat import S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISREG, S_ISSOCK
from typing import BinaryIO, Optional

from rankscope.serial import OMIT_NONE, SKIP

_ELF_MAGIC = b"\x7fELF"
_ET_CORE = 4
_PT_LOAD = 1
_PT_NOTE = 4
_NT_PRSTATUS = 1
_NT_PRPSINFO = 3
_NT_AUXV = 6
_NT_FILE = 0x46494C45
_AT_PHDR = 3
_AT_EXECFN = 31
#: Notes larger than this are not a core's (a garbage header must not make us read gigabytes).
_MAX_NOTES = 256 << 20
#: How much of the stack below AT_EXECFN is searched for environment strings.
_ENV_WINDOW = 1 << 20
#: Environment variables kept from the core (rank and job identity: the rendezvous tells one job's
#: ranks from another's; nothing else leaves the core).
RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HOSTNAME",
)


class NotACoreError(ValueError):
    """The file is not a core file rankscope can read, or it is cut short; the message says which."""


@dataclass
class CoreNotes:
    """What one core file records about the process that left it."""

    path: str
    size: int
    #: When the core was written (the file's modification time).
    mtime: float = field(metadata={"round": 3})
    pid: Optional[int] = None
    ppid: Optional[int] = None
    uid: Optional[int] = None
    #: The kernel's 15-character program name (``python3.11``, ``pt_main_thread``).
    program: str = ""
    #: The first 80 bytes of the command line.
    args: str = ""
    #: The signal that ended it (0 in a core gdb's gcore wrote of a live process).
    signal: Optional[int] = None
    #: Thread ids; the first is the thread that received the signal.
    threads: list[int] = field(default_factory=list)
    #: The executable mapped into the process (None when the notes do not say).
    executable: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The path given to exec (may be relative or a symbolic link).
    execfn: Optional[str] = field(default=None, metadata=OMIT_NONE)
    #: The launcher's rank variables found in the process's environment.
    env: dict[str, str] = field(default_factory=dict)
    #: Every file mapped into the process (libraries included), in mapping order, no repeats.
    mapped: list[str] = field(default_factory=list, metadata=SKIP)
    #: The notes were read, but the file is shorter than its headers say (a core cut at ulimit -c).
    truncated: bool = False

    @property
    def signal_name(self) -> str:
        if self.signal is None:
            return "unknown signal"
        if self.signal == 0:
            return "no signal"
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    @property
    def crashing_thread(self) -> Optional[int]:
        return self.threads[0] if self.threads else None

    @property
    def written_by_gcore(self) -> bool:
        """A core of a live process, not of a crash: gdb's gcore records no signal (0), others SIGSTOP."""
        return self.signal in (0, signal.SIGSTOP)


@dataclass(frozen=True)
class _Segment:
    kind: int
    offset: int
    vaddr: int
    filesz: int


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _headers(f: BinaryIO, size: int) -> list[_Segment]:
    ident = f.read(64)
    if len(ident) < 4 or ident[:4] != _ELF_MAGIC:
        raise NotACoreError("not an ELF file (no core file starts like this)")
    if len(ident) < 64:
        raise NotACoreError(f"truncated: {size} bytes, shorter than an ELF header")
    if ident[4] != 2 or ident[5] != 1:
        raise NotACoreError("a 32-bit or big-endian ELF file: only 64-bit little-endian cores are read")
    e_type, _machine, _version, _entry, e_phoff = struct.unpack_from("<HHIQQ", ident, 16)
    if e_type != _ET_CORE:
        raise NotACoreError(f"an ELF file of type {e_type}, not a core file (type 4)")
    e_phentsize, e_phnum = struct.unpack_from("<HH", ident, 54)
    if e_phentsize < 56 or e_phnum == 0 or e_phnum > 1 << 20:
        raise NotACoreError("damaged ELF header (program header table)")
    f.seek(e_phoff)
    table = f.read(e_phentsize * e_phnum)
    if len(table) < e_phentsize * e_phnum:
        raise NotACoreError(f"truncated: {size} bytes, cut inside the program headers")
    segments = []
    for i in range(e_phnum):
        kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", table, i * e_phentsize)
        segments.append(_Segment(kind, offset, vaddr, filesz))
    return segments


def _notes(blob: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos + 12 <= len(blob):
        namesz, descsz, kind = struct.unpack_from("<III", blob, pos)
        pos += 12 + ((namesz + 3) & ~3)
        desc = blob[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        if len(desc) < descsz:
            break
        out.append((kind, desc))
    return out


def _file_mappings(desc: bytes) -> list[tuple[int, int, str]]:
    if len(desc) < 16:
        return []
    count, _page = struct.unpack_from("<QQ", desc, 0)
    if count > len(desc) // 24:
        return []
    ranges = [struct.unpack_from("<QQQ", desc, 16 + 24 * i) for i in range(count)]
    names = desc[16 + 24 * count :].split(b"\0")
    return [(start, end, names[i].decode("utf-8", "replace")) for i, (start, end, _ofs) in enumerate(ranges)]


def _read_memory(f: BinaryIO, loads: list[_Segment], address: int, before: int) -> tuple[bytes, bytes]:
    """The process's memory up to ``before`` bytes before ``address``, and from it on (4 KiB at most)."""
    for seg in loads:
        if seg.vaddr <= address < seg.vaddr + seg.filesz:
            start = max(seg.vaddr, address - before)
            end = min(seg.vaddr + seg.filesz, address + 4096)
            f.seek(seg.offset + start - seg.vaddr)
            data = f.read(end - start)
            return data[: address - start], data[address - start :]
    return b"", b""


def _rank_env(region: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in region.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name.decode("ascii", "replace") in RANK_VARIABLES:
            env[name.decode()] = value.decode("utf-8", "replace")
    return env


def _kind(mode: int) -> str:
    kinds = (
        (S_ISFIFO, "a FIFO"),
        (S_ISDIR, "a directory"),
        (S_ISCHR, "a character device"),
        (S_ISBLK, "a block device"),
        (S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def read_notes(path: str) -> CoreNotes:
    """The notes of the core file at ``path``; :class:`NotACoreError` when it is not one (or cut short).

    Opened without blocking (a FIFO planted under a core's name would block ``open`` forever) and
    read only when it is a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        stat = os.fstat(f.fileno())
        if not S_ISREG(stat.st_mode):
            raise NotACoreError(f"not a regular file ({_kind(stat.st_mode)})")
        os.set_blocking(fd, True)
        size = stat.st_size
        segments = _headers(f, size)
        note_seg = next((s for s in segments if s.kind == _PT_NOTE), None)
        if note_seg is None:
            raise NotACoreError("a core file without notes (no PT_NOTE segment)")
        if note_seg.filesz > _MAX_NOTES:
            raise NotACoreError("damaged ELF header (a note segment of more than 256 MB)")
        f.seek(note_seg.offset)
        blob = f.read(note_seg.filesz)
        if len(blob) < note_seg.filesz:
            raise NotACoreError(f"truncated: {size} bytes, cut inside the notes (the thread registers)")
        notes = CoreNotes(path=path, size=size, mtime=stat.st_mtime)
        auxv: dict[int, int] = {}
        files: list[tuple[int, int, str]] = []
        for kind, desc in _notes(blob):
            if kind == _NT_PRSTATUS and len(desc) >= 48:
                signo = struct.unpack_from("<h", desc, 12)[0] or struct.unpack_from("<i", desc, 0)[0]
                tid, ppid = struct.unpack_from("<ii", desc, 32)
                if notes.signal is None:
                    notes.signal = signo
                    notes.ppid = ppid
                notes.threads.append(tid)
            elif kind == _NT_PRPSINFO and len(desc) >= 136:
                notes.uid, _gid, notes.pid = struct.unpack_from("<IIi", desc, 16)
                notes.program = _cstr(desc[40:56])
                notes.args = _cstr(desc[56:136]).strip()
            elif kind == _NT_AUXV:
                for i in range(len(desc) // 16):
                    key, value = struct.unpack_from("<QQ", desc, 16 * i)
                    auxv.setdefault(key, value)
            elif kind == _NT_FILE:
                files = _file_mappings(desc)
        seen: dict[str, None] = {}
        for _start, _end, name in files:
            seen.setdefault(name)
        notes.mapped = list(seen)
        phdr = auxv.get(_AT_PHDR)
        if phdr is not None:
            notes.executable = next((name for start, end, name in files if start <= phdr < end), None)
        if notes.executable is None and files:
            notes.executable = files[0][2]
        loads = [s for s in segments if s.kind == _PT_LOAD]
        notes.truncated = any(s.offset + s.filesz > size for s in loads)
        execfn = auxv.get(_AT_EXECFN)
        if execfn:
            environment, at_execfn = _read_memory(f, loads, execfn, _ENV_WINDOW)
            notes.execfn = _cstr(at_execfn) or None
            notes.env = _rank_env(environment)
    return notes

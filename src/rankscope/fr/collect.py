"""Reading flight-recorder dumps from files (the only I/O of rankscope.fr).

A path is a directory (every dump file in it, as torch's analyzer reads one) or a prefix
(``/tmp/nccl_trace_rank_`` reads ``/tmp/nccl_trace_rank_0``, ``..._1``, ...: what
``TORCH_FR_DUMP_TEMP_FILE`` names). The rank is the number the file name ends with (before an
optional ``.json``/``.pkl``/``.pickle``), as torch writes it. A rank with both a pickle and a JSON
dump is read from the pickle (JSON dumps carry no Python frames).

Pickles are read with an unpickler that refuses every class: a flight-recorder dump holds only dicts,
lists, tuples, strings and numbers, and loading a pickle that names a class could run any code.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.fr.records import DEFAULT_LIMITS, MAX_RANK, Cache, Limits, RankDump, dump_from_raw

_NAME = re.compile(r"^(?P<stem>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pkl|\.pickle)?$")

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


class _NoClasses(pickle.Unpickler):
    """Containers and scalars only: any class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight-recorder dump holds no objects")


#: Said of a dump whose end is missing: torch writes the file in place, so a rank killed (or out of
#: disk) while writing leaves a prefix of it.
TRUNCATED = "cut short (truncated): the rank may have died while writing it"
#: A file of NUL bytes only: its size was set, its data never written (the node or the rank died
#: before the file system wrote it out).
ZEROED = "only NUL bytes: the dump's data was never written (the rank or its node died while writing it)"
NEITHER = "neither a pickle nor JSON"


def is_json(data: bytes) -> bool:
    """A dump's bytes are JSON (text starting with ``{``), not a pickle."""
    return data[:1] in (b"{", b" ", b"\n")


def load_bytes(data: bytes) -> Any:
    """A dump's bytes decoded: JSON (:func:`is_json`) or a restricted pickle; ValueError
    (:data:`TRUNCATED`) for a dump that lacks its end, (:data:`ZEROED`, :data:`NEITHER`) for bytes
    that are no dump's at all."""
    if not data.strip(b"\0"):
        raise ValueError(ZEROED)
    if not is_json(data) and data[:1] != b"\x80":
        raise ValueError(f"{NEITHER} (it starts with {data[:8].hex(' ')})")
    if is_json(data):
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError:
            if not data.rstrip().endswith(b"}"):
                raise ValueError(TRUNCATED) from None
            raise
    try:
        return _NoClasses(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError) as err:
        # Every pickle ends with STOP ("."), and the unpickler says when it ran out of data; a refused
        # class is said as such, whatever the end.
        ran_out = isinstance(err, EOFError) or "truncated" in str(err) or not data.endswith(b".")
        if ran_out and "refused" not in str(err):
            raise ValueError(TRUNCATED) from None
        raise


@dataclass
class Collected:
    dumps: list[RankDump] = field(default_factory=list)
    #: Files that looked like dumps but could not be read: (path, reason).
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: rank -> why none of its files was read ("PATH: reason"): a live rank may be behind it.
    refused: dict[int, str] = field(default_factory=dict)


def human_bytes(count: int) -> str:
    """``16 MiB``, ``512 KiB``, ``1000 B``: the caps as docs/fr.md writes them."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} B"


def _not_a_directory(file: Path) -> bool:
    try:
        return not stat.S_ISDIR(os.lstat(file).st_mode)
    except OSError:
        return False


def _rank_of(file: Path) -> Optional[int]:
    match = _NAME.match(file.name)
    return int(match["rank"]) if match and len(match["rank"]) <= 7 else None


def _candidates(path: Path) -> list[tuple[int, Path]]:
    """(rank, file) of every file that may be a dump; links, FIFOs and the like are kept when named
    like one, to be refused by name (never opened for reading)."""
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if _not_a_directory(p)]
        stem_filter = None
    else:
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise BadInputError(f"{path}: no such file or directory")
        if _not_a_directory(path):  # one dump named in full; without a number in its name, rank 0
            rank = _rank_of(path)
            return [(rank if rank is not None else 0, path)]
        stem_filter = path.name
        files = [p for p in sorted(parent.iterdir()) if p.name.startswith(path.name) and _not_a_directory(p)]
    found = []
    # empty, or neither a pickle nor JSON: a dump only beside dumps named like it (else a log, ...)
    empty: list[tuple[int, Path, str]] = []
    for file in files:
        match = _NAME.match(file.name)
        rank = _rank_of(file)
        if not match or rank is None or rank >= MAX_RANK:
            continue
        if stem_filter is not None and match["stem"] != stem_filter:
            continue
        if stem_filter is None:
            head = _head(file)
            if head is not None and head[:1] not in (b"\x80", b"{"):
                # empty, zeroed or garbled: a dump its rank did not finish when it is named like the
                # dumps (refused with its reason); else a log or anything else beside them
                empty.append((rank, file, match["stem"]))
                continue
        found.append((rank, file))
    stems = {m["stem"] for _, f in found if (m := _NAME.match(f.name))}
    found.extend((rank, file) for rank, file, stem in empty if stem in stems)
    return found


def _head(file: Path) -> Optional[bytes]:
    """The first bytes of a regular file (a pickle starts with 0x80, JSON with ``{``); None for
    anything else (kept, to be named when it is refused) or a file that cannot be read."""
    try:
        fd = _open_regular(str(file))
    except (OSError, ValueError):
        return None
    try:
        return os.read(fd, 64).lstrip()
    except OSError:
        return None  # reported as unreadable
    finally:
        os.close(fd)


def _refuse_other_kinds(mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise ValueError("a symbolic link: not followed")
    for test, kind in _KINDS:
        if test(mode):
            raise ValueError(f"not a regular file ({kind}): not read")


def _open_regular(path: str, uid: Optional[int] = None) -> int:
    """A read-only descriptor of a regular file, opened without blocking (a FIFO) and without
    following a link; ValueError naming what else it is. With ``uid``: only a file of that user,
    with one link (a hard link planted to another user's file is refused). What is not a regular file
    is named from lstat without being opened (opening some devices does something)."""
    _refuse_other_kinds(os.lstat(path).st_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError("a symbolic link: not followed") from None
        raise
    try:
        st = os.fstat(fd)
        _refuse_other_kinds(st.st_mode)  # replaced since lstat
        if uid is not None and (st.st_uid != uid or st.st_nlink != 1):
            raise ValueError(f"not the process's own file (uid {st.st_uid}, {st.st_nlink} links): not read")
    except (OSError, ValueError):
        os.close(fd)
        raise
    return fd


def read_capped(path: str, max_bytes: int, uid: Optional[int] = None) -> bytes:
    """The bytes of a regular file (see :func:`_open_regular`) of at most ``max_bytes``; a larger
    one is refused unread (ValueError with its size)."""
    fd = _open_regular(path, uid)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise ValueError(f"{size} bytes, over the {human_bytes(max_bytes)} cap: not read")
        chunks = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_bytes:  # it grew while being read
        raise ValueError(f"over the {human_bytes(max_bytes)} cap: not read")
    if not total:
        raise ValueError("empty file")
    return b"".join(chunks)


def read_dumps(path: Path, limits: Limits = DEFAULT_LIMITS) -> Collected:
    """Every rank's dump under a directory or prefix, each cut to ``limits``; NothingFoundError when
    there is none, BadInputError when the path does not exist or no file there is a dump."""
    if not os.path.lexists(path) and not path.parent.is_dir():
        raise BadInputError(f"{path}: no such file or directory")
    candidates = _candidates(path)
    if not candidates:
        raise NothingFoundError(
            f"no flight-recorder dumps at {path}",
            "files are named PREFIX<rank> (TORCH_FR_DUMP_TEMP_FILE=PREFIX); give their directory or PREFIX",
        )
    # Per rank, the pickle first (it has frames), then JSON.
    by_rank: dict[int, list[Path]] = {}
    for rank, file in sorted(candidates, key=lambda c: (c[0], c[1].suffix == ".json", str(c[1]))):
        by_rank.setdefault(rank, []).append(file)
    collected = Collected()
    cache = Cache()  # stacks, names and shapes repeat across ranks too
    for rank, files in sorted(by_rank.items()):
        reasons = []
        for file in files:
            try:
                dump = _read_one(file, rank, cache, limits)
            except (OSError, ValueError, pickle.UnpicklingError, EOFError, UnicodeDecodeError) as err:
                reasons.append((str(file), str(err) or type(err).__name__))
                continue
            except Exception as err:  # a corrupt pickle can raise almost anything
                reasons.append((str(file), f"{type(err).__name__}: {err}"))
                continue
            collected.dumps.append(dump)
            break
        else:
            collected.unreadable.extend(reasons)
            collected.refused[rank] = "; ".join(f"{Path(p).name}: {why}" for p, why in reasons)
    if not collected.dumps:
        first = collected.unreadable[0] if collected.unreadable else (str(path), "unreadable")
        raise BadInputError(f"no readable flight-recorder dump at {path}: {first[0]}: {first[1]}")
    return collected


def _read_one(file: Path, rank: int, cache: Cache, limits: Limits) -> RankDump:
    try:
        data = read_capped(str(file), limits.max_bytes)
    except ValueError as err:
        if str(err) == "empty file":  # torch opens the file before it writes it
            raise ValueError("empty file: the rank may have died before writing it") from None
        raise
    dump = dump_from_raw(load_bytes(data), rank, str(file), cache, limits)
    dump.json = is_json(data)
    return dump


def read_live_dump(path: str, uid: int, rank: int, cache: Cache) -> RankDump:
    """A dump a rank's in-process handler wrote just now into its private runtime directory, cut to
    the default :class:`Limits` (the bytes first: a 16 MiB cap, as for files).

    Only a regular file of ``uid`` itself, never through a link; OSError or ValueError (and what a
    corrupt pickle raises) when it cannot be read.
    """
    data = read_capped(path, DEFAULT_LIMITS.max_bytes, uid)
    dump = dump_from_raw(load_bytes(data), rank, path, cache)
    dump.json = is_json(data)
    return dump

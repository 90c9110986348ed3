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

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.fr.records import Cache, RankDump, dump_from_raw
from rankscope.inproc import runtime

#: A dump larger than this is not read (a 2000-entry dump with frames is a few MB).
MAX_BYTES = 1 << 30

_NAME = re.compile(r"^(?P<stem>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pkl|\.pickle)?$")


class _NoClasses(pickle.Unpickler):
    """Containers and scalars only: any class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight-recorder dump holds no objects")


def load_bytes(data: bytes) -> Any:
    """A dump's bytes decoded: JSON (text starting with ``{``) or a restricted pickle."""
    if data[:1] in (b"{", b" ", b"\n"):
        return json.loads(data.decode("utf-8"))
    return _NoClasses(io.BytesIO(data)).load()


@dataclass
class Collected:
    dumps: list[RankDump] = field(default_factory=list)
    #: Files that looked like dumps but could not be read: (path, reason).
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def _candidates(path: Path) -> list[tuple[int, Path]]:
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if p.is_file()]
        stem_filter = None
    else:
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise BadInputError(f"{path}: no such file or directory")
        stem_filter = path.name
        files = [p for p in sorted(parent.iterdir()) if p.is_file() and p.name.startswith(path.name)]
        if path.is_file():  # one dump named in full; without a number in its name, rank 0
            match = _NAME.match(path.name)
            return [(int(match["rank"]) if match else 0, path)]
    found = []
    for file in files:
        if stem_filter is None and not _looks_like_dump(file):
            continue  # a log or anything else beside the dumps
        match = _NAME.match(file.name)
        if not match:
            continue
        if stem_filter is not None and match["stem"] != stem_filter:
            continue
        found.append((int(match["rank"]), file))
    return found


def _looks_like_dump(file: Path) -> bool:
    """A pickle (protocol 2+ starts with 0x80) or a JSON object."""
    try:
        with open(file, "rb") as handle:
            head = handle.read(64).lstrip()
    except OSError:
        return True  # reported as unreadable
    return head[:1] in (b"\x80", b"{")


def read_dumps(path: Path) -> Collected:
    """Every rank's dump under a directory or prefix; NothingFoundError when there is none,
    BadInputError when the path does not exist or no file there is a dump."""
    if not path.exists() and not path.parent.is_dir():
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
                dump = _read_one(file, rank, cache)
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
    if not collected.dumps:
        first = collected.unreadable[0] if collected.unreadable else (str(path), "unreadable")
        raise BadInputError(f"no readable flight-recorder dump at {path}: {first[0]}: {first[1]}")
    return collected


def _read_one(file: Path, rank: int, cache: Cache) -> RankDump:
    with open(file, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    if not data:
        raise ValueError("empty file")
    return dump_from_raw(load_bytes(data), rank, str(file), cache)


def read_live_dump(path: str, uid: int, rank: int, cache: Cache) -> RankDump:
    """A dump a rank's in-process handler wrote just now into its private runtime directory.

    Only a file of ``uid`` itself, never through a link (see rankscope.inproc.runtime.read_owned);
    OSError or ValueError (and what a corrupt pickle raises) when it cannot be read.
    """
    data = runtime.read_owned(path, uid, MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    if not data:
        raise ValueError("empty file")
    return dump_from_raw(load_bytes(data), rank, path, cache)

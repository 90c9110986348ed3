"""One rank's flight-recorder dump as rankscope reads it (pure: a decoded dump in, records out).

torch writes a dump as a dict (pickled by ``_dump_fr_trace``, JSON from ``_dump_fr_trace_json``):
``version``, ``pg_config`` (process group name -> name, desc, ranks), ``pg_status`` (name -> last
enqueued / started / completed collective), ``entries`` (one per collective or p2p op: ``record_id``,
``process_group`` (name, desc), ``collective_seq_id``, ``p2p_seq_id``, ``profiling_name``
(``gloo:all_reduce``, ``nccl:send 0->1``), input sizes and dtypes, ``state``, ``retired``, and with
stack traces ``frames``, innermost first). Versions differ in which keys exist and whether numbers
are strings; every field here has a default, and a dump that is not a dict with ``entries`` is refused.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.model import Frame

#: Frames of torch itself: skipped when naming who issued a collective.
_LIBRARY_PARTS = ("/torch/", "/site-packages/", "/dist-packages/", "<frozen ")


@dataclass(eq=False)
class Entry:
    """One collective or point-to-point operation one rank issued (not frozen: a million of them are
    made for 512 ranks x 2000 entries, and a frozen dataclass costs twice as much to build)."""

    pg: str
    seq: int
    op: str
    pg_desc: str = ""
    p2p_seq: int = 0
    backend: str = ""
    sizes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    state: str = ""
    retired: bool = False
    is_p2p: bool = False
    #: A send's destination or a recv's source, as global ranks (``nccl:send 0->1``), when named.
    peer: Optional[int] = None
    record_id: int = 0
    #: Counts every operation, collectives and p2p alike (gloo records no send/recv: gaps show them).
    op_id: int = 0
    time_ns: int = 0
    #: Innermost first, as torch records them.
    frames: tuple[Frame, ...] = ()
    #: The user's call (see :func:`user_frame`), found once when the entry is read.
    site: Optional[Frame] = None

    def call_site(self) -> Optional[Frame]:
        """The innermost frame outside torch and installed packages: the user's call."""
        return self.site if self.site is not None or not self.frames else user_frame(self.frames)


def user_frame(frames: Sequence[Frame]) -> Optional[Frame]:
    for frame in frames:
        if not any(part in frame.filename for part in _LIBRARY_PARTS):
            return frame
    return None


class Cache:
    """What many entries share, built once per reading: frames (a stack repeats thousands of times),
    profiling names, process groups, sizes."""

    def __init__(self) -> None:
        self.stacks: dict[Any, tuple[tuple[Frame, ...], Optional[Frame]]] = {}
        self.names: dict[Any, tuple[str, str, Optional[int], Optional[int]]] = {}
        self.groups: dict[Any, tuple[str, str]] = {}
        self.shapes: dict[Any, tuple[tuple[int, ...], ...]] = {}


@dataclass(frozen=True)
class GroupStatus:
    """pg_status: the last collective a rank enqueued, started and completed in one group (-1: none)."""

    pg: str
    last_enqueued: int = -1
    last_started: int = -1
    last_completed: int = -1


@dataclass
class RankDump:
    rank: int
    path: str
    version: str = ""
    comm_lib_version: str = ""
    entries: list[Entry] = field(default_factory=list)
    status: list[GroupStatus] = field(default_factory=list)
    #: Members of groups as pg_config names them (only where it names the group of the entries and its ranks).
    group_ranks: dict[str, list[int]] = field(default_factory=dict)
    group_desc: dict[str, str] = field(default_factory=dict)

    def status_of(self, pg: str) -> Optional[GroupStatus]:
        for status in self.status:
            if status.pg == pg:
                return status
        return None


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(tuple(_int(v) for v in s) if isinstance(s, (list, tuple)) else (_int(s),) for s in value)


def _frames(value: Any) -> tuple[Frame, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    frames = []
    for item in value:
        if isinstance(item, Mapping):
            frames.append(Frame(_str(item.get("name")), _str(item.get("filename")), _int(item.get("line"))))
    return tuple(frames)


def split_name(profiling_name: str) -> tuple[str, str, Optional[int], Optional[int]]:
    """``nccl:send 0->1`` -> (``nccl``, ``send``, 0, 1); ``gloo:all_reduce`` -> (``gloo``, ``all_reduce``, None, None)."""
    backend, _, rest = profiling_name.partition(":")
    if not rest:
        backend, rest = "", profiling_name
    op, _, ends = rest.strip().partition(" ")
    src = dst = None
    if "->" in ends:
        left, _, right = ends.partition("->")
        if left.strip().isdigit() and right.strip().isdigit():
            src, dst = int(left), int(right)
    return backend, op, src, dst


def _stack(value: Any, cache: Cache) -> tuple[tuple[Frame, ...], Optional[Frame]]:
    if not value:
        return (), None
    try:
        key: Any = tuple((f["name"], f["filename"], f["line"]) for f in value)
        hash(key)
    except (TypeError, KeyError, AttributeError):
        key = None
    if key is not None:
        found = cache.stacks.get(key)
        if found is None:
            frames = _frames(value)
            found = cache.stacks[key] = (frames, user_frame(frames))
        return found
    frames = _frames(value)
    return frames, user_frame(frames)


def _group(value: Any, raw: Mapping[str, Any], cache: Cache) -> tuple[str, str]:
    try:
        found = cache.groups.get(value)
    except TypeError:  # a list (JSON)
        value = tuple(value) if isinstance(value, list) else value
        found = cache.groups.get(value) if isinstance(value, tuple) else None
    if found is not None:
        return found
    if isinstance(value, (list, tuple)) and value:
        found = (_str(value[0]), _str(value[1]) if len(value) > 1 else "")
    else:
        found = (_str(raw.get("pg_id", "")), "")
    if isinstance(value, tuple):
        cache.groups[value] = found
    return found


def _shape(value: Any, cache: Cache) -> tuple[tuple[int, ...], ...]:
    try:
        key = tuple(tuple(s) for s in value)
        found = cache.shapes.get(key)
    except TypeError:
        return _sizes(value)
    if found is None:
        found = cache.shapes[key] = _sizes(value)
    return found


def entry_from_raw(raw: Mapping[str, Any], cache: Optional[Cache] = None) -> Entry:
    cache = cache if cache is not None else Cache()
    get = raw.get
    name = get("profiling_name")
    parsed = cache.names.get(name) if isinstance(name, str) else None
    if parsed is None:
        parsed = split_name(_str(name))
        if isinstance(name, str):
            cache.names[name] = parsed
    backend, op, src, dst = parsed
    pg_name, pg_desc = _group(get("process_group"), raw, cache)
    frames, site = _stack(get("frames"), cache)
    seq, p2p_seq, record_id, op_id, time_ns = (
        get("collective_seq_id", get("seq_id")),  # torch 2.2's dumps (version 1.x) name it seq_id
        get("p2p_seq_id"),
        get("record_id"),
        get("op_id"),
        get("time_created_ns"),
    )
    dtypes = get("input_dtypes")
    return Entry(
        pg=pg_name,
        pg_desc=pg_desc,
        seq=seq if type(seq) is int else _int(seq),
        p2p_seq=p2p_seq if type(p2p_seq) is int else _int(p2p_seq),
        op=op,
        backend=backend,
        sizes=_shape(get("input_sizes") or (), cache),
        dtypes=tuple(_str(d) for d in dtypes) if isinstance(dtypes, list) else (),
        state=_str(get("state")),
        retired=bool(get("retired")),
        is_p2p=bool(get("is_p2p")) or op in ("send", "recv"),
        peer=dst if op == "send" else src if op == "recv" else None,
        record_id=record_id if type(record_id) is int else _int(record_id),
        op_id=op_id if type(op_id) is int else _int(op_id),
        time_ns=time_ns if type(time_ns) is int else _int(time_ns),
        frames=frames,
        site=site,
    )


def _ranks(value: Any) -> list[int]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return []
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def dump_from_raw(data: Any, rank: int, path: str, cache: Optional[Cache] = None) -> RankDump:
    """A decoded dump as records; ValueError when it is not a flight-recorder dump."""
    if not isinstance(data, Mapping) or "entries" not in data:
        raise ValueError("not a flight-recorder dump (no 'entries')")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, Sequence) or isinstance(raw_entries, (str, bytes)):
        raise ValueError("not a flight-recorder dump ('entries' is not a list)")
    cache = cache if cache is not None else Cache()
    entries = [entry_from_raw(e, cache) for e in raw_entries if isinstance(e, Mapping)]
    status = []
    pg_status = data.get("pg_status")
    if isinstance(pg_status, Mapping):
        for name, values in pg_status.items():
            if isinstance(values, Mapping):
                status.append(
                    GroupStatus(
                        _str(name),
                        _int(values.get("last_enqueued_collective"), -1),
                        _int(values.get("last_started_collective"), -1),
                        _int(values.get("last_completed_collective"), -1),
                    )
                )
    group_ranks: dict[str, list[int]] = {}
    group_desc: dict[str, str] = {}
    pg_config = data.get("pg_config")
    if isinstance(pg_config, Mapping):
        for name, config in pg_config.items():
            # gloo (torch 2.13) writes one config under the name "" whose ranks belong to whichever group
            # was registered last: only a config under a real group name is believed.
            if isinstance(config, Mapping) and _str(name):
                members = _ranks(config.get("ranks"))
                if members:
                    group_ranks[_str(name)] = members
                group_desc[_str(name)] = _str(config.get("desc"))
    return RankDump(
        rank=rank,
        path=path,
        version=_str(data.get("version")),
        comm_lib_version=_str(data.get("comm_lib_version")),
        entries=entries,
        status=status,
        group_ranks=group_ranks,
        group_desc=group_desc,
    )

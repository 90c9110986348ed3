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


@dataclass(frozen=True)
class Entry:
    """One collective or point-to-point operation one rank issued."""

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

    def call_site(self) -> Optional[Frame]:
        """The innermost frame outside torch and installed packages: the user's call."""
        for frame in self.frames:
            if not any(part in frame.filename for part in _LIBRARY_PARTS):
                return frame
        return None

    def signature(self) -> tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]:
        return (self.op, self.sizes, self.dtypes)


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


def entry_from_raw(raw: Mapping[str, Any]) -> Entry:
    backend, op, src, dst = split_name(_str(raw.get("profiling_name")))
    pg = raw.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        pg_name, pg_desc = _str(pg[0]), _str(pg[1]) if len(pg) > 1 else ""
    else:
        pg_name, pg_desc = _str(raw.get("pg_id", "")), ""
    is_p2p = bool(raw.get("is_p2p")) or op in ("send", "recv")
    peer = dst if op == "send" else src if op == "recv" else None
    return Entry(
        pg=pg_name,
        pg_desc=pg_desc,
        seq=_int(raw.get("collective_seq_id")),
        p2p_seq=_int(raw.get("p2p_seq_id")),
        op=op,
        backend=backend,
        sizes=_sizes(raw.get("input_sizes")),
        dtypes=tuple(
            _str(d) for d in raw.get("input_dtypes") or () if isinstance(raw.get("input_dtypes"), list)
        ),
        state=_str(raw.get("state")),
        retired=bool(raw.get("retired")),
        is_p2p=is_p2p,
        peer=peer,
        record_id=_int(raw.get("record_id")),
        op_id=_int(raw.get("op_id")),
        time_ns=_int(raw.get("time_created_ns")),
        frames=_frames(raw.get("frames")),
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


def dump_from_raw(data: Any, rank: int, path: str) -> RankDump:
    """A decoded dump as records; ValueError when it is not a flight-recorder dump."""
    if not isinstance(data, Mapping) or "entries" not in data:
        raise ValueError("not a flight-recorder dump (no 'entries')")
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, Sequence) or isinstance(raw_entries, (str, bytes)):
        raise ValueError("not a flight-recorder dump ('entries' is not a list)")
    entries = [entry_from_raw(e) for e in raw_entries if isinstance(e, Mapping)]
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

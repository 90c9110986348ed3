"""One rank's flight-recorder dump as rankscope reads it (pure: a decoded dump in, records out).

torch writes a dump as a dict (pickled by ``_dump_fr_trace``, JSON from ``_dump_fr_trace_json``):
``version``, ``pg_config`` (process group name -> name, desc, ranks), ``pg_status`` (name -> last
enqueued / started / completed collective), ``entries`` (one per collective or p2p op: ``record_id``,
``process_group`` (name, desc), ``collective_seq_id``, ``p2p_seq_id``, ``profiling_name``
(``gloo:all_reduce``, ``nccl:send 0->1``), input sizes and dtypes, ``state``, ``retired``, and with
stack traces ``frames``, innermost first). Versions differ in which keys exist and whether numbers
are strings; every field here has a default, and a dump that is not a dict with ``entries`` is refused.

A dump is cut to :class:`Limits` (its last entries, each stack's innermost frames), and what was cut is
said (:attr:`RankDump.cut`). Whatever the dump shares (a pickle may reference one stack from every
entry) is converted once per object: a small pickle never costs entries x frames.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional, TypeVar

from rankscope.model import Frame

T = TypeVar("T")

#: Backends whose entries never say ``completed`` (no events): ``retired`` is their word for done
#: ("": a profiling name without a backend, read as before).
_EVENTLESS = ("gloo", "")

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
    out_sizes: tuple[tuple[int, ...], ...] = ()
    out_dtypes: tuple[str, ...] = ()
    state: str = ""
    retired: bool = False
    is_p2p: bool = False
    #: A send's destination or a recv's source, as global ranks (``nccl:send 0->1``), when named.
    peer: Optional[int] = None
    record_id: int = 0
    #: Counts every operation, collectives and p2p alike (gloo records no send/recv: gaps show them).
    op_id: int = 0
    time_ns: int = 0
    #: How long the work took, where torch timed it (``duration_ms``: NCCL with TORCH_NCCL_ENABLE_TIMING).
    duration_ms: Optional[float] = None
    #: From enqueued to when the watchdog saw it completed (``time_discovered_completed_ns``): an upper bound.
    discovered_ms: Optional[float] = None
    #: Innermost first, as torch records them.
    frames: tuple[Frame, ...] = ()
    #: The user's call (see :func:`user_frame`), found once when the entry is read.
    site: Optional[Frame] = None

    @property
    def done(self) -> bool:
        """The entry's own word that it finished: NCCL marks it ``completed`` (its end event fired);
        gloo, which has no events, leaves every entry ``scheduled`` and sets ``retired`` once the work is
        done. A backend with events that retired an entry it never saw complete timed it out."""
        return self.state == "completed" or (self.retired and self.backend in _EVENTLESS)

    @property
    def timed_out(self) -> bool:
        """Retired by a backend with events without completing: its watchdog gave up on it."""
        return self.retired and not self.done

    def call_site(self) -> Optional[Frame]:
        """The innermost frame outside torch and installed packages: the user's call."""
        return self.site if self.site is not None or not self.frames else user_frame(self.frames)


def is_library(frame: Frame) -> bool:
    """A frame of torch or an installed package, not the user's."""
    return any(part in frame.filename for part in _LIBRARY_PARTS)


def user_frame(frames: Sequence[Frame]) -> Optional[Frame]:
    for frame in frames:
        if not is_library(frame):
            return frame
    return None


@dataclass(frozen=True)
class Limits:
    """How much of one dump is read (docs/fr.md, "Limits"): a real 2000-entry dump with frames is a few MB."""

    #: A larger file is not read at all (named, with its size).
    max_bytes: int = 16 << 20
    #: The last ones are kept (the most recent: a ring buffer that wrapped earlier).
    max_entries: int = 10_000
    #: Innermost first: the user's call is near the collective.
    max_frames: int = 64
    #: Process groups in pg_status / pg_config.
    max_groups: int = 1_000
    #: Tensors listed per entry, dimensions per tensor.
    max_tensors: int = 1_024
    max_dims: int = 64


DEFAULT_LIMITS = Limits()


class Cache:
    """What many entries share, built once per reading: frames (a stack repeats thousands of times),
    profiling names, process groups, sizes."""

    def __init__(self) -> None:
        self.stacks: dict[Any, tuple[tuple[Frame, ...], Optional[Frame]]] = {}
        self.names: dict[Any, tuple[str, str, Optional[int], Optional[int]]] = {}
        self.groups: dict[Any, tuple[str, str]] = {}
        self.shapes: dict[Any, tuple[tuple[int, ...], ...]] = {}
        #: id() of an object of the dump being read -> what it was converted to (a pickle shares
        #: objects: each is converted once). Only valid while that dump is alive: cleared after it.
        self.seen: dict[tuple[str, int], Any] = {}
        self.limits = DEFAULT_LIMITS
        #: What the dump being read lost to the limits: entries whose stack was cut, the longest stack,
        #: entries whose tensor lists were cut.
        self.cut_stacks = 0
        self.longest_stack = 0
        self.cut_tensors = 0

    def start(self, limits: Limits) -> None:
        self.seen.clear()
        self.limits = limits
        self.cut_stacks = self.longest_stack = self.cut_tensors = 0


@dataclass(frozen=True)
class GroupStatus:
    """pg_status: the last collective a rank enqueued, started and completed in one group (-1: none)."""

    pg: str
    last_enqueued: int = -1
    last_started: int = -1
    last_completed: int = -1
    #: ``pg`` is the group's name; False: the key pg_status gave (a ``pg_id``) that nothing paired with one.
    named: bool = True


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
    #: What the limits cut, in words ("kept the last 10000 of 25000 entries"); empty when nothing was.
    cut: list[str] = field(default_factory=list)
    #: What the report should say about how this dump was read (a layout it cannot fully use).
    notes: list[str] = field(default_factory=list)
    #: Entries dropped from the start: groups may have no entry left, which says nothing about them.
    entries_cut: int = 0
    #: pg_id -> group name, as this dump's entries pair them (pairs another rank's pg_status).
    pg_ids: dict[str, str] = field(default_factory=dict)
    #: pg_config names a process group: torch records groups only while the recorder is on.
    groups_registered: bool = False
    #: Read from JSON (which never carries frames), not from a pickle.
    json: bool = False

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
        return int(value) if math.isfinite(value) else default
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def _str(value: Any) -> str:
    """A string field; a number as text; anything else (a container: its text could be huge) ""."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and abs(value) < 1 << 64:
        return str(value)
    return ""


def _capped_tuple(
    kind: str, value: Sequence[Any], most: int, convert: Callable[[Any], T], cache: Cache
) -> tuple[T, ...]:
    """``convert`` of each of the first ``most`` items of a list, once per list object of the dump."""
    found: Optional[tuple[T, ...]] = cache.seen.get((kind, id(value)))
    if found is None:
        if len(value) > most:
            cache.cut_tensors += 1
        found = cache.seen[(kind, id(value))] = tuple(convert(v) for v in value[:most])
    return found


def _dims(value: Any, cache: Cache) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        return (_int(value),)
    return _capped_tuple("t", value, cache.limits.max_dims, _int, cache)


def _sizes(value: Any, cache: Cache) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    most = cache.limits.max_tensors
    if len(value) > most:
        cache.cut_tensors += 1
    return tuple(_dims(s, cache) for s in value[:most])


def _frames(value: Sequence[Any]) -> tuple[Frame, ...]:
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
    # torch writes ``send <me>-><peer>`` and ``recv <me><-<peer>`` (ranks in the group, not global).
    arrow = "->" if "->" in ends else "<-" if "<-" in ends else ""
    if arrow:
        left, _, right = ends.partition(arrow)
        if left.strip().isdigit() and right.strip().isdigit() and max(len(left), len(right)) < 10:
            src, dst = int(left), int(right)
            if arrow == "<-":
                src, dst = dst, src
            if max(src, dst) >= MAX_RANK:
                src = dst = None
    return backend, op, src, dst


def _stack(value: Any, cache: Cache) -> tuple[tuple[Frame, ...], Optional[Frame]]:
    if not value or not isinstance(value, (list, tuple)):
        return (), None
    if len(value) > cache.limits.max_frames:
        cache.cut_stacks += 1
        cache.longest_stack = max(cache.longest_stack, len(value))
    shared: Optional[tuple[tuple[Frame, ...], Optional[Frame]]] = cache.seen.get(("f", id(value)))
    if shared is not None:
        return shared
    kept = value[: cache.limits.max_frames]
    try:
        key: Any = tuple((f["name"], f["filename"], f["line"]) for f in kept)
        hash(key)
    except (TypeError, KeyError, AttributeError):
        key = None
    found = cache.stacks.get(key) if key is not None else None
    if found is None:
        frames = _frames(kept)
        found = (frames, user_frame(frames))
        if key is not None:
            cache.stacks[key] = found
    cache.seen[("f", id(value))] = found
    return found


def _group(value: Any, raw: Mapping[str, Any], cache: Cache) -> tuple[str, str]:
    """(name, desc) of ``process_group``: a (name, desc) pair, or before it the entry's ``pg_id``."""
    if not isinstance(value, (list, tuple)) or not value:
        return (_str(raw.get("pg_id", "")), "")
    found: Optional[tuple[str, str]] = cache.seen.get(("g", id(value)))
    if found is None:
        name = _str(value[0])
        key = (name, _desc(name, _str(value[1]) if len(value) > 1 else ""))
        found = cache.seen[("g", id(value))] = cache.groups.setdefault(key, key)
    return found


#: The description torch gives the default group (``init_process_group``) since it names groups' uses.
DEFAULT_DESC = "default_pg"


def _desc(name: str, desc: str) -> str:
    """A group's description; the default group's where a dump gives it none (``undefined``, torch's word
    for a group without one, or nothing): the default group is always named "0"."""
    return DEFAULT_DESC if name == "0" and desc in ("", "undefined") else desc


def _shape(value: Any, cache: Cache) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    found: Optional[tuple[tuple[int, ...], ...]] = cache.seen.get(("z", id(value)))
    if found is None:
        sizes = _sizes(value, cache)
        found = cache.seen[("z", id(value))] = cache.shapes.setdefault(sizes, sizes)
    return found


def _dtypes(value: Any, cache: Cache) -> tuple[str, ...]:
    if isinstance(value, str):  # one dtype written alone
        return (value,) if value else ()
    if not isinstance(value, (list, tuple)):
        return ()
    return _capped_tuple("d", value, cache.limits.max_tensors, _str, cache)


def _milliseconds(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12:
        return float(value)
    return None


def _since(start: Any, end: Any) -> Optional[float]:
    """Milliseconds from ``start`` to ``end`` (nanosecond clocks), when both are there and in order."""
    if type(start) is int and type(end) is int and 0 < start <= end:
        return _milliseconds((end - start) / 1e6)
    return None


def _first_shape(value: Any) -> Any:
    """The first recorder's ``sizes`` (the first tensor's shape, a flat list) as a list of shapes."""
    return [value] if isinstance(value, list) else None


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
        sizes=_shape(get("input_sizes", _first_shape(get("sizes"))), cache),
        dtypes=_dtypes(dtypes, cache),
        out_sizes=_shape(get("output_sizes"), cache),
        out_dtypes=_dtypes(get("output_dtypes"), cache),
        state=_str(get("state")),
        retired=bool(get("retired")),
        is_p2p=bool(get("is_p2p")) or op in ("send", "recv"),
        peer=dst if op == "send" else src if op == "recv" else None,
        record_id=record_id if type(record_id) is int else _int(record_id),
        op_id=op_id if type(op_id) is int else _int(op_id),
        time_ns=time_ns if type(time_ns) is int else _int(time_ns),
        duration_ms=_milliseconds(get("duration_ms")),
        discovered_ms=_since(time_ns, get("time_discovered_completed_ns")),
        frames=frames,
        site=site,
    )


#: Rank numbers at or above this are not believed (a hostile dump's 10**12 would make the job that big).
MAX_RANK = 1 << 20
#: A ``ranks`` field written as text longer than this is not parsed (100,000 ranks are about 700 kB).
_MAX_RANKS_TEXT = 4 << 20


def _ranks(value: Any, cache: Cache) -> list[int]:
    if isinstance(value, str):
        if len(value) > _MAX_RANKS_TEXT:
            return []
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return []
    if not isinstance(value, (list, tuple)):
        return []
    found: Optional[list[int]] = cache.seen.get(("r", id(value)))
    if found is None:
        found = cache.seen[("r", id(value))] = [
            v
            for v in value[:MAX_RANK]
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_RANK
        ]
    return found


def _capped(mapping: Any, most: int) -> list[tuple[Any, Any]]:
    """The first ``most`` items of a dict field (pg_status, pg_config); [] when it is not a dict."""
    if not isinstance(mapping, Mapping):
        return []
    return list(itertools.islice(mapping.items(), most))


def dump_from_raw(
    data: Any, rank: int, path: str, cache: Optional[Cache] = None, limits: Limits = DEFAULT_LIMITS
) -> RankDump:
    """A decoded dump as records, cut to ``limits``; ValueError when it is not a flight-recorder dump.

    A dump without ``entries`` is read when it has the rest of one (``version`` and ``pg_status`` or
    ``pg_config``): torch's JSON dump leaves the key out when no entry is left to write (only the active
    ones asked for, and every collective completed), and ``includeCollectives=False`` writes none. The
    first recorder (torch 2.2's ``_dump_nccl_trace``) pickled the bare list of entries."""
    if isinstance(data, list) and data and isinstance(data[0], Mapping) and "profiling_name" in data[0]:
        data = {"entries": data}
    if not isinstance(data, Mapping) or (
        "entries" not in data and ("version" not in data or not ({"pg_status", "pg_config"} & data.keys()))
    ):
        raise ValueError("not a flight-recorder dump (no 'entries')")
    raw_entries = data.get("entries", [])
    if not isinstance(raw_entries, Sequence) or isinstance(raw_entries, (str, bytes)):
        raise ValueError("not a flight-recorder dump ('entries' is not a list)")
    cache = cache if cache is not None else Cache()
    cache.start(limits)
    try:
        return _dump(data, raw_entries, rank, path, cache)
    finally:
        cache.seen.clear()  # ids of objects about to be freed


def _dump(
    data: Mapping[str, Any], raw_entries: Sequence[Any], rank: int, path: str, cache: Cache
) -> RankDump:
    limits = cache.limits
    kept = raw_entries[-limits.max_entries :] if len(raw_entries) > limits.max_entries else raw_entries
    entries = [entry_from_raw(e, cache) for e in kept if isinstance(e, Mapping)]
    cut = []
    dropped = len(raw_entries) - len(kept)
    if dropped:
        cut.append(f"kept the last {len(kept)} of {len(raw_entries)} entries")
    if cache.cut_stacks:
        cut.append(
            f"kept the innermost {limits.max_frames} frames of {cache.cut_stacks} entries' stacks "
            f"(up to {cache.longest_stack} frames)"
        )
    if cache.cut_tensors:
        cut.append(
            f"kept the first {limits.max_tensors} tensors and {limits.max_dims} dimensions of "
            f"{cache.cut_tensors} tensor lists"
        )
    status = []
    groups = data.get("pg_status"), data.get("pg_config")
    if any(isinstance(g, Mapping) and len(g) > limits.max_groups for g in groups):
        cut.append(f"kept the first {limits.max_groups} process groups")
    status_groups = _capped(groups[0], limits.max_groups)
    config_names = [_str(k) for k, _ in _capped(groups[1], limits.max_groups)]
    pg_ids = _pg_ids(kept, entries)
    names = _status_names([_str(k) for k, _ in status_groups], pg_ids, config_names)
    for name, values in status_groups:
        if isinstance(values, Mapping):
            status.append(
                GroupStatus(
                    names.get(_str(name), _str(name)),
                    _int(values.get("last_enqueued_collective"), -1),
                    _int(values.get("last_started_collective"), -1),
                    _int(values.get("last_completed_collective"), -1),
                    _str(name) in names,
                )
            )
    group_ranks: dict[str, list[int]] = {}
    group_desc: dict[str, str] = {}
    members_left = (
        MAX_RANK  # all groups' members together (one shared list can name a million ranks per group)
    )
    for name, config in _capped(groups[1], limits.max_groups):
        # gloo (torch 2.13) writes one config under the name "" whose ranks belong to whichever group
        # was registered last: only a config under a real group name is believed.
        # torch 2.2-2.3 (version 1.x) wrote ``{pg_id: [ranks]}``; later ``{name: {name, desc, ranks}}``.
        if isinstance(config, (list, tuple)):
            config = {"ranks": config}
        if isinstance(config, Mapping) and _str(name):
            members = _ranks(config.get("ranks"), cache)
            if members and len(members) > members_left:
                cut.append(f"kept the members of the groups up to {MAX_RANK} ranks in all")
                break
            if members:
                group_ranks[_str(name)] = members
                members_left -= len(members)
            group_desc[_str(name)] = _desc(_str(name), _str(config.get("desc")))
    _global_peers(entries, group_ranks)
    notes = []
    first = next((e for e in kept if isinstance(e, Mapping)), None)
    if first is not None and "seq_id" in first and "collective_seq_id" not in first:
        lost = _renumber_collectives(entries)
        if lost:
            version = _str(data.get("version")) or "without a version"
            notes.append(
                f"rank {rank}'s dump (version {version}) numbers its send/recv and collectives together and "
                "lost its first records: its collectives' numbers may be off by the send/recv it no longer holds"
            )
    return RankDump(
        rank=rank,
        path=path,
        version=_str(data.get("version")),
        # torch's dumps up to version 2.7 name it nccl_version.
        comm_lib_version=_str(data.get("comm_lib_version", data.get("nccl_version"))),
        entries=entries,
        status=status,
        group_ranks=group_ranks,
        group_desc=group_desc,
        pg_ids=pg_ids,
        groups_registered=isinstance(groups[1], Mapping) and len(groups[1]) > 0,
        cut=cut,
        notes=notes,
        entries_cut=dropped,
    )


def _pg_ids(raw_entries: Sequence[Any], entries: Sequence[Entry]) -> dict[str, str]:
    """pg_id -> the group's name, as the entries pair them (``pg_id`` beside ``process_group``)."""
    ids: dict[str, str] = {}
    for raw, entry in zip((r for r in raw_entries if isinstance(r, Mapping)), entries):
        pg_id = raw.get("pg_id")
        if pg_id is not None and raw.get("process_group") is not None:
            ids.setdefault(_str(pg_id), entry.pg)
    return ids


def _status_names(keys: Sequence[str], ids: Mapping[str, str], config_names: Sequence[str]) -> dict[str, str]:
    """pg_status key -> group name. torch keys pg_status by the group's ``pg_id`` (a counter of the
    process) and everything else by its name: the same only for the default names ("0", "1", ...); a
    ``group_name`` or a hashed name differs. The entries pair ids with names; a key none of them pairs is
    a name of pg_config that no pair claims, or the one id left with the one name left; else kept."""
    names = {k: ids[k] for k in keys if k in ids}
    claimed = set(names.values())
    left = [k for k in keys if k not in names]
    unclaimed = [n for n in config_names if n and n not in claimed]
    for key in left:
        if key in unclaimed:
            names[key] = key
    left = [k for k in left if k not in names]
    unclaimed = [n for n in unclaimed if n not in names.values()]
    if len(left) == 1 and len(unclaimed) == 1:
        names[left[0]] = unclaimed[0]
    return names


def pair_status_ids(dumps: Sequence[RankDump]) -> None:
    """pg_status keys a dump could not pair with a group name itself (its entries left out the group:
    only the active ones were dumped), paired as the other dumps' entries pair them, where that name is
    one of the dump's own groups (pg_config) and no other key of it has that name. Ranks that made the
    same groups number them alike; a rank outside a group numbers the later ones otherwise, which the
    membership check leaves out."""
    for dump in dumps:
        if all(s.named for s in dump.status):
            continue
        claimed = {s.pg for s in dump.status if s.named}
        for index, status in enumerate(dump.status):
            if status.named:
                continue
            names = {d.pg_ids[status.pg] for d in dumps if d is not dump and status.pg in d.pg_ids}
            names = {n for n in names if n in dump.group_desc and n not in claimed}
            if len(names) == 1:
                name = names.pop()
                dump.status[index] = replace(status, pg=name, named=True)
                claimed.add(name)


def _renumber_collectives(entries: Sequence[Entry]) -> bool:
    """Version 1.x (and the first recorder) numbered every operation of a group with one ``seq_id``:
    collectives, and each send/recv outside a batch (a batch of them: its closing ``coalesced`` entry).
    Ranks that send and receive differently (pipeline stages) then give one collective other numbers.
    Each collective is renumbered to count collectives only, in every group whose first operation
    (number 1) the dump still holds (a ring buffer drops the oldest first, so nothing of it was lost);
    True when a group with send/recv lost its start and was left as it was."""
    by_group: dict[str, list[Entry]] = {}
    for entry in entries:
        by_group.setdefault(entry.pg, []).append(entry)
    lost = False
    for group in by_group.values():
        previous_p2p = False
        for entry in group:  # a batch's send/recv come just before its closing entry
            if entry.op == "coalesced" and previous_p2p:
                entry.is_p2p = True
            if entry.is_p2p and not entry.p2p_seq:  # no p2p_seq_id yet: its own number names it
                entry.p2p_seq = entry.seq
            previous_p2p = entry.is_p2p
        collectives = {e.seq for e in group if not e.is_p2p}
        p2p = sorted({e.seq for e in group if e.is_p2p} - collectives)
        if not p2p:
            continue
        if min(e.seq for e in group) != 1:
            lost = True
            continue
        for entry in group:
            if not entry.is_p2p:
                entry.seq -= bisect.bisect_left(p2p, entry.seq)
    return lost


def _global_peers(entries: Sequence[Entry], group_ranks: Mapping[str, list[int]]) -> None:
    """A p2p peer as a global rank: torch names it by its rank in the group (``send 0->1`` in a group of
    ranks [2, 3] goes from rank 2 to rank 3); left as written where the dump names no members."""
    ordered: dict[str, list[int]] = {}
    for entry in entries:
        if entry.peer is None or entry.pg not in group_ranks:
            continue
        members = ordered.get(entry.pg)
        if members is None:
            members = ordered[entry.pg] = sorted(group_ranks[entry.pg])
        if entry.peer < len(members):
            entry.peer = members[entry.peer]


def add_members(dump: RankDump, groups: Any) -> None:
    """Members the rank's own process named beside its dump (``{"<pg name>": [ranks]}``, the in-process
    handler's answer), for the groups the dump itself does not name (gloo's recorder names none).
    Anything but a dict of lists of ranks is ignored; at most :data:`MAX_RANK` ranks in all."""
    if not isinstance(groups, Mapping):
        return
    left = MAX_RANK - sum(len(m) for m in dump.group_ranks.values())
    for name, value in itertools.islice(groups.items(), DEFAULT_LIMITS.max_groups):
        if not isinstance(name, str) or not name or name in dump.group_ranks or not isinstance(value, list):
            continue
        members = sorted(
            {v for v in value[:left] if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_RANK}
        )
        if members:
            dump.group_ranks[name] = members
            left -= len(members)

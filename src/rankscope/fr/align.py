"""Align every rank's flight-recorder entries per process group and judge the first divergence (pure).

Per group, the collectives of every member rank are lined up by ``collective_seq_id``. The first
sequence number where ranks disagree is the divergence: a different op, other sizes or dtypes, the
same op issued from another line (gloo pairs such calls silently: wrong sums before the hang), or
ranks that never issued it. One entry of look-ahead tells an extra collective (the odd ranks' next
one is the others' one) from a skipped one (the others' next one is the odd ranks' one). Members that
left no dump are named first: their records are the ones nobody can see.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Optional

from rankscope.folding import RankSet
from rankscope.fr.records import DEFAULT_DESC, Entry, RankDump, is_library, pair_status_ids
from rankscope.fr.report import (
    CALL_SITE,
    DTYPE,
    EXTRA,
    MISSING,
    NO_DUMP,
    NOT_STARTED,
    OP,
    P2P,
    SIZE,
    SKIPPED,
    UNMATCHED,
    Divergence,
    FrReport,
    GroupView,
    RankProgress,
    RecentEntry,
    Refused,
    Side,
    Unreadable,
)
from rankscope.model import Frame

DEFAULT_PG = DEFAULT_DESC

#: The variables that turn the recorder on (torch 2.13 records by default; TORCH_FR_BUFFER_SIZE=0 turns it off;
#: older releases record only with a size, and before 2.5 under the NCCL names).
ENABLE_HINT = (
    "set TORCH_FR_BUFFER_SIZE=2000 (torch < 2.5: TORCH_NCCL_TRACE_BUFFER_SIZE=2000) in every rank's "
    "environment; TORCH_FR_DUMP_TEMP_FILE=/some/dir/rank_ names the files torch writes on an NCCL watchdog "
    "timeout (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE)"
)

#: Said after a divergence whose records have no frames: it may be the consequence of an earlier call.
NO_CALL_SITES = (
    " — the call sites are missing (JSON dumps carry no frames): an earlier collective of the same op and "
    "sizes issued from another line cannot be seen, so this may be its consequence, not the cause; "
    "pickle dumps with frames name the lines"
)
#: The same, where a pickle has no frames either (``includeStackTraces=False``, TORCH_INCLUDE_STACK_TRACE=0).
NO_STACKS = NO_CALL_SITES.replace(
    "(JSON dumps carry no frames)",
    "(the dumps were taken without stack traces: includeStackTraces=False or TORCH_INCLUDE_STACK_TRACE=0)",
)

Sizes = tuple[tuple[int, ...], ...]
Place = tuple[str, str, int]
#: What must agree across ranks for one operation: op, input sizes and dtypes, output sizes and dtypes, and
#: the user's frames that issued it (innermost first; None when not compared).
Key = tuple[str, Sizes, tuple[str, ...], Sizes, tuple[str, ...], Optional[tuple[Place, ...]]]
#: One sequence number's operations on one rank, in record order: one, or a coalesced collective's several.
Ops = list[Entry]


def _ranks_word(ranks: Sequence[int]) -> str:
    return RankSet.of(ranks).phrase()


def place(frame: Optional[Frame]) -> str:
    """``log_global_loss (train.py:22)``; a module-level call is just ``train.py:37``; a frame a dump
    gave no line (0) names no line."""
    if frame is None:
        return ""
    where = f"{frame.short_filename}:{frame.line}" if frame.line > 0 else frame.short_filename
    if frame.function in ("<module>", ""):
        return where
    return f"{frame.function} ({where})"


def _from(frame: Optional[Frame]) -> str:
    return f" from {place(frame)}" if frame is not None else ""


@functools.lru_cache(maxsize=4096)
def _user_frames(frames: tuple[Frame, ...]) -> tuple[Place, ...]:
    return tuple((f.function, f.filename, f.line) for f in frames if not is_library(f))


def _stack_key(entry: Entry) -> Optional[tuple[Place, ...]]:
    """The user's frames that issued the entry (innermost first): two calls through one shared wrapper
    from different lines differ here. A record that keeps only its call site (the compact records of
    other nodes) gives that; one with neither (JSON) None."""
    if entry.frames:
        return _user_frames(entry.frames)
    site = entry.call_site()
    return ((site.function, site.filename, site.line),) if site is not None else None


def _key(entry: Entry, stacks: bool = True) -> Key:
    """What every rank must agree on. Sizes of all_to_all and of the ``_v`` collectives are not compared
    (uneven splits are legal); a gather's output and a scatter's input exist on the root only."""
    op = entry.op.lower()
    sizes = "all_to_all" not in op and "alltoall" not in op and not op.endswith("_v") and "_v_" not in op
    inputs = not op.lstrip("_").startswith("scatter")
    outputs = not op.lstrip("_").startswith("gather")
    return (
        entry.op,
        entry.sizes if sizes and inputs else (),
        entry.dtypes if inputs else (),
        entry.out_sizes if sizes and outputs else (),
        entry.out_dtypes if outputs else (),
        _stack_key(entry) if stacks else None,
    )


def _seq_key(ops: Optional[Ops], stacks: bool = True) -> Optional[tuple[Key, ...]]:
    return tuple(_key(e, stacks) for e in ops) if ops else None


def _fork(entry: Entry, other: Entry) -> Optional[Frame]:
    """Where ``entry``'s user stack leaves ``other``'s, outermost first: the line that differs when both
    reach the collective through the same innermost call (a shared wrapper); None otherwise."""
    if not entry.frames or not other.frames or entry.call_site() != other.call_site():
        return None
    ours = [f for f in reversed(entry.frames) if not is_library(f)]
    theirs = [f for f in reversed(other.frames) if not is_library(f)]
    for mine, yours in zip(ours, theirs):
        if mine != yours:
            return mine if mine != entry.call_site() else None
    return None


def _side(
    ranks: Sequence[int],
    entry: Optional[Entry],
    completed: Optional[bool] = None,
    operations: int = 1,
    fork: Optional[Frame] = None,
) -> Side:
    if entry is None:
        return Side(str(RankSet.of(ranks)), sorted(ranks))
    return Side(
        ranks=str(RankSet.of(ranks)),
        rank_list=sorted(ranks),
        op=entry.op,
        seq=entry.seq,
        sizes=[list(s) for s in entry.sizes],
        dtypes=list(entry.dtypes),
        out_sizes=[list(s) for s in entry.out_sizes],
        out_dtypes=list(entry.out_dtypes),
        operations=operations,
        call_site=entry.call_site(),
        diverges_at=fork,
        frames=list(entry.frames),
        completed=completed,
    )


def _tensors(sizes: Sizes, dtypes: Sequence[str]) -> str:
    text = ", ".join("x".join(str(d) for d in s) or "scalar" for s in sizes)
    return f"[{text}] {'/'.join(dtypes)}".strip()


def _shape(entry: Entry) -> str:
    """``[8] Float``; ``[4x4] Float -> [5x4] Float`` when the output differs from the input."""
    shown = _tensors(entry.sizes, entry.dtypes) if entry.sizes else "no tensors"
    if (entry.out_sizes or entry.out_dtypes) and (entry.out_sizes, entry.out_dtypes) != (
        entry.sizes,
        entry.dtypes,
    ):
        shown += " -> " + _tensors(entry.out_sizes, entry.out_dtypes)
    return shown


def world_of(dumps: Sequence[RankDump], world_size: Optional[int] = None) -> list[int]:
    """The job's ranks as far as the dumps tell: every dump's rank, every rank a group names, every p2p peer."""
    if world_size:
        return list(range(world_size))
    known = {d.rank for d in dumps}
    for dump in dumps:
        for members in dump.group_ranks.values():
            known.update(members)
        known.update(e.peer for e in dump.entries if e.peer is not None)
    return list(range(max(known) + 1)) if known else []


def _groups(dumps: Sequence[RankDump], world: Sequence[int]) -> list[tuple[str, str, list[int], bool]]:
    """(pg name, desc, member ranks, whether the dumps name them: False when only the ranks seen in the
    group's entries and statuses are known), per group. Groups that share a name but not their members
    (``split_group`` names every part alike) are one group per member list, each judged apart."""
    named: dict[str, dict[tuple[int, ...], None]] = {}
    descs: dict[str, str] = {}
    seen: dict[str, set[int]] = {}
    for dump in dumps:
        for name, members in dump.group_ranks.items():
            named.setdefault(name, {})[tuple(sorted(members))] = None
        for name, desc in dump.group_desc.items():
            if desc:
                descs.setdefault(name, desc)
        for entry in dump.entries:
            seen.setdefault(entry.pg, set()).add(dump.rank)
            if entry.pg_desc:
                descs.setdefault(entry.pg, entry.pg_desc)
        for status in dump.status:
            seen.setdefault(status.pg, set()).add(dump.rank)
    groups: list[tuple[str, str, list[int], bool]] = []
    for name in sorted(seen, key=lambda n: (len(n), n)):
        desc = descs.get(name, "")
        if name in named:
            groups.extend((name, desc, list(members), True) for members in sorted(named[name]))
        elif desc == DEFAULT_PG or (not desc and name == "0"):
            groups.append((name, desc, list(world), True))
        else:
            groups.append((name, desc, sorted(seen[name]), False))
    return groups


def unmatched(view: GroupView, members_named: bool, world: Sequence[int], dumps: dict[int, RankDump]) -> None:
    """A group whose members no dump names (gloo's recorder names none; only the ranks seen in it are
    known) where every rank seen waits in one collective that no other dumped rank issued: a member
    never issued it, but which one the records cannot tell. Set as the group's divergence, no suspects."""
    if members_named or view.divergence is not None or view.desc == DEFAULT_PG or not view.pg:
        return
    seen = [p for p in view.progress if p.rank in dumps]
    if not seen or any(p.last_enqueued < 0 or p.last_completed >= p.last_enqueued for p in seen):
        return
    seqs = {p.last_enqueued for p in seen}
    if len(seqs) != 1:
        return
    seq = seqs.pop()
    ranks = [p.rank for p in seen]
    entry = next(
        (e for e in dumps[ranks[0]].entries if e.pg == view.pg and e.seq == seq and not e.is_p2p), None
    )
    if entry is None:
        return
    members = set(view.member_list)
    others = [r for r in world if r not in members]
    if not others:
        return
    where = group_name(view.pg, view.desc)
    verb = "waits" if len(ranks) == 1 else "wait"
    text = (
        f"{_ranks_word(ranks)} {verb} in {_describe(entry)} in {where}, which no other dumped rank issued; the "
        f"dumps do not name the members of {where} (gloo's recorder does not), so the member that never "
        f"issued it is one of {_ranks_word(others)}"
    )
    view.divergence = Divergence(view.pg, view.desc, UNMATCHED, seq, [], text, [_side(ranks, entry, False)])


def group_name(pg: str, desc: str) -> str:
    """``the default group``, ``group 3 (tp)``, ``group 3``; a dump that names no group (no
    ``process_group``, no ``pg_id``): ``the group the dumps do not name``."""
    if desc == DEFAULT_PG:
        return "the default group"
    named = desc and desc != "undefined"
    if not pg:
        return f"the group {desc!r}" if named else "the group the dumps do not name"
    if named:
        return f"group {pg} ({desc})"
    return f"group {pg}"


def _lookahead(
    odd: Sequence[int],
    rest: Sequence[int],
    seq: int,
    by_rank: dict[int, dict[int, Ops]],
    rest_key: Optional[tuple[Key, ...]],
    odd_key: Optional[tuple[Key, ...]],
    stacks: bool = True,
) -> Optional[str]:
    """EXTRA when every odd rank's next collective is what the others issued here; SKIPPED when the
    others' next is what the odd ranks issued here; None when the records cannot tell."""
    odd_next = [_seq_key(by_rank[r].get(seq + 1), stacks) for r in odd]
    if odd_next and all(k is not None and k == rest_key for k in odd_next):
        return EXTRA
    rest_next = [_seq_key(by_rank[r].get(seq + 1), stacks) for r in rest]
    if rest_next and all(k is not None and k == odd_key for k in rest_next):
        return SKIPPED
    return None


def _mismatch_kind(a: Entry, b: Entry) -> str:
    ka, kb = _key(a, False), _key(b, False)
    if ka[0] != kb[0]:
        return OP
    if (ka[1], ka[3]) != (kb[1], kb[3]):
        return SIZE
    if (ka[2], ka[4]) != (kb[2], kb[4]):
        return DTYPE
    return CALL_SITE


def _pick(ours: Ops, theirs: Ops, stacks: bool = True) -> tuple[Entry, Entry, str]:
    """The first operation where two ranks' operations under one number differ, each side's, and how;
    a coalesced collective of another length differs in its operations (OP)."""
    for a, b in zip(ours, theirs):
        if _key(a, stacks) != _key(b, stacks):
            return a, b, _mismatch_kind(a, b)
    at = min(len(ours), len(theirs))
    return ours[min(at, len(ours) - 1)], theirs[min(at, len(theirs) - 1)], OP


def _describe(entry: Entry, ops: Optional[Ops] = None, fork: Optional[Frame] = None) -> str:
    """``all_reduce #3 from step (train.py:37)``; where the stacks fork below a shared wrapper
    (``, reached from log_loss (train.py:20)``); inside a coalesced collective, which of its operations."""
    text = f"{entry.op} #{entry.seq}{_from(entry.call_site())}"
    if fork is not None:
        text += f", reached from {place(fork)}"
    if ops is not None and len(ops) > 1:
        names = ", ".join(e.op for e in ops)
        index = next((i for i, e in enumerate(ops) if e is entry), 0)
        text += f" (operation {index + 1} of {len(ops)} under #{entry.seq}: {names})"
    return text


def _judge_seq(
    pg: str,
    desc: str,
    seq: int,
    present: dict[int, Ops],
    behind: list[int],
    by_rank: dict[int, dict[int, Ops]],
    latest: dict[int, Entry],
    issued: dict[int, int],
    where: str,
) -> Optional[Divergence]:
    # Stacks are compared only where every rank's records have them (a JSON dump beside a pickle: not).
    stacks = all(_stack_key(e) is not None for ops in present.values() for e in ops)
    keys = {r: _seq_key(ops, stacks) for r, ops in present.items()}
    counts = Counter(keys.values())

    def finished(ranks: Sequence[int]) -> bool:
        return all(e.done for r in ranks for e in present[r])

    if len(counts) > 1:
        # The largest set of ranks that agree is "the others"; a tie leaves no odd one out (lowest rank first).
        ordered = sorted(counts, key=lambda k: (-counts[k], min(r for r, kk in keys.items() if kk == k)))
        majority = ordered[0]
        rest = sorted(r for r, k in keys.items() if k == majority)
        odd = sorted(r for r, k in keys.items() if k != majority)
        rest_ops, odd_ops = present[rest[0]], present[odd[0]]
        rest_entry, odd_entry, kind = _pick(rest_ops, odd_ops, stacks)
        # Each camp: its ranks, its operations, the one that differs from the others' (the majority's first).
        camps = [(rest, rest_ops, rest_entry)]
        for other in ordered[1:]:
            ranks = sorted(r for r, k in keys.items() if k == other)
            camps.append((ranks, present[ranks[0]], _pick(rest_ops, present[ranks[0]], stacks)[1]))
        forks = {
            id(entry): _fork(entry, odd_entry if entry is rest_entry else rest_entry) for _, _, entry in camps
        }
        sides = [
            _side(ranks, entry, finished(ranks), len(ops), forks[id(entry)]) for ranks, ops, entry in camps
        ]
        tie = counts[majority] == counts[ordered[1]]
        shape = (
            _lookahead(odd, rest, seq, by_rank, majority, keys[odd[0]], stacks) if len(ordered) == 2 else None
        )
        # Two equal camps: the one whose next collective is the other's current one issued the extra.
        swap = tie and len(ordered) == 2 and shape != EXTRA
        if swap and _lookahead(rest, odd, seq, by_rank, keys[odd[0]], majority, stacks) == EXTRA:
            odd, rest, shape = rest, odd, EXTRA
            rest_ops, odd_ops = odd_ops, rest_ops
            rest_entry, odd_entry = odd_entry, rest_entry
        odd_words = _describe(odd_entry, odd_ops, forks.get(id(odd_entry)))
        rest_words = _describe(rest_entry, rest_ops, forks.get(id(rest_entry)))
        if shape == EXTRA:
            text = f"{_ranks_word(odd)} issued an extra {odd_words} in {where}; {_ranks_word(rest)} issued {rest_words}"
            kind = EXTRA
        elif shape == SKIPPED:
            text = (
                f"{_ranks_word(odd)} skipped {rest_words} in {where}, which {_ranks_word(rest)} issued; "
                f"{'they' if len(odd) > 1 else 'it'} issued {odd_words} instead"
            )
            kind = SKIPPED
        else:
            what = {
                OP: "different collectives",
                SIZE: "different sizes",
                DTYPE: "different dtypes",
                CALL_SITE: "the same collective from different lines (paired with each other: wrong results)",
            }[kind]
            in_order = sorted(camps, key=lambda c: c[0][0]) if tie else camps[1:] + camps[:1]
            parts = []
            for ranks, ops, entry in in_order:
                tensors = f" with {_shape(entry)}" if kind in (SIZE, DTYPE) else ""
                parts.append(
                    f"{_ranks_word(ranks)} issued {_describe(entry, ops, forks[id(entry)])}{tensors}"
                )
            text = f"collective #{seq} of {where}: {what}: " + "; ".join(parts)
            if tie:
                odd = sorted(present)
        return Divergence(pg, desc, kind, seq, odd, text, sides)
    if behind:
        ops = next(iter(present.values()))
        entry = ops[-1]
        done = sorted(present)
        lasts = {r: issued[r] for r in behind}
        last_words = "; ".join(
            f"{_ranks_word([r for r in behind if lasts[r] == last])} last issued {number(last)}"
            for last in sorted(set(lasts.values()))
        )
        for rank in behind:
            now = latest.get(rank)
            if now is not None and now.pg != pg and not now.done:
                last_words += f"; rank {rank} waits in {_describe(now)} of {group_name(now.pg, now.pg_desc)}"
        text = (
            f"{_ranks_word(behind)} never issued {_describe(entry, ops)} in {where}, which {_ranks_word(done)} "
            f"issued ({'completed' if finished(done) else 'waiting'}); {last_words}"
        )
        sides = [_side(done, entry, finished(done), len(ops))]
        missing = _side(behind, None)
        lowest = min(lasts.values())
        missing.last_seq = lowest if lowest >= 0 else None
        sides.append(missing)
        return Divergence(pg, desc, MISSING, seq, sorted(behind), text, sides)
    return None


def _version_at_least(version: str, wanted: tuple[int, int]) -> bool:
    """A dump's ``version`` (``"2.10"``) is ``wanted`` or later; one that does not read as numbers is not."""
    parts = version.split(".")[:2]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return False
    return (int(parts[0]), int(parts[1])) >= wanted


def _alltoall_totals(
    pg: str, desc: str, seq: int, present: dict[int, Ops], where: str
) -> Optional[Divergence]:
    """An all_to_all whose ranks agree on everything but whose tensors do not add up: every element one
    rank sends, another receives, so the group's inputs and outputs hold as many elements in all. Their
    splits disagree (NCCL then hangs or fails); which rank's split is wrong the dumps cannot tell."""
    sent = received = 0
    per_rank = []
    for rank, ops in sorted(present.items()):
        if len(ops) != 1:
            return None
        entry = ops[0]
        op = entry.op.lower()
        if ("all_to_all" not in op and "alltoall" not in op) or not entry.sizes or not entry.out_sizes:
            return None
        mine_in = sum(math.prod(size) for size in entry.sizes)
        mine_out = sum(math.prod(size) for size in entry.out_sizes)
        sent, received = sent + mine_in, received + mine_out
        per_rank.append(f"rank {rank} {mine_in} -> {mine_out}")
    if sent == received:
        return None
    entry = next(iter(present.values()))[0]
    text = (
        f"collective #{seq} of {where}: {_describe(entry)} whose sizes do not add up: the ranks send "
        f"{sent} elements in all and receive {received} (elements in -> out: {', '.join(per_rank)}); their "
        "split sizes disagree, and the dumps cannot tell whose is wrong"
    )
    ranks = sorted(present)
    done = all(e.done for ops in present.values() for e in ops)
    return Divergence(pg, desc, SIZE, seq, ranks, text, [_side(ranks, entry, done)])


def latest_entries(dumps: dict[int, RankDump]) -> dict[int, Entry]:
    """Each rank's most recent entry (any group): where it is now, when not retired."""
    return {rank: last_entry(dump.entries) for rank, dump in dumps.items() if dump.entries}


def last_entry(entries: Sequence[Entry]) -> Entry:
    """The most recent of a rank's entries: by time and record id, then by place (the first dumps had
    neither, and a dump lists its entries oldest first)."""
    return max(enumerate(entries), key=lambda ie: (ie[1].time_ns, ie[1].record_id, ie[0]))[1]


def cut_away(pg: str, members: Sequence[int], dumps: dict[int, RankDump]) -> list[int]:
    """Members whose dump was cut to its last entries and kept none of this group: their records
    say nothing about it (never "behind")."""
    return [
        r
        for r in members
        if r in dumps
        and dumps[r].entries_cut
        and not any(e.pg == pg and not e.is_p2p for e in dumps[r].entries)
    ]


def _completed(seqs: dict[int, Ops], reported: int) -> int:
    """The last collective a rank completed in a group, by its entries' own state (pg_status lags:
    NCCL's said -1 beside seven entries marked completed); pg_status only for what lies before
    the entries kept (-1: none)."""
    done = [s for s, ops in seqs.items() if all(e.done for e in ops)]
    if done:
        return max(done)
    return min(reported, min(seqs) - 1) if seqs else reported


def number(seq: int, none: str = "nothing") -> str:
    """``#7``; ``none`` for the -1 that means "no collective" (never printed as a number)."""
    return f"#{seq}" if seq >= 0 else none


def judge_group(
    pg: str, desc: str, members: Sequence[int], dumps: dict[int, RankDump], shared_name: bool = False
) -> GroupView:
    """One group's view; ``shared_name``: another group has the same name (its words name the ranks)."""
    unknown = set(cut_away(pg, members, dumps))
    dumped = [r for r in members if r in dumps]
    absent = [r for r in members if r not in dumps]
    by_rank: dict[int, dict[int, Ops]] = {}
    for rank in dumped:
        # Every number counts, 0 too; a coalesced collective's operations share one.
        numbered: dict[int, Ops] = {}
        for e in dumps[rank].entries:
            if e.pg == pg and not e.is_p2p:
                numbered.setdefault(e.seq, []).append(e)
        by_rank[rank] = numbered
    view = GroupView(pg, desc, str(RankSet.of(members)), list(members), absent=absent)
    for rank in dumped:
        status = dumps[rank].status_of(pg)
        seqs = by_rank[rank]
        last = max(seqs, default=-1)
        entry = seqs[last][-1] if last in seqs else None
        enqueued = max(status.last_enqueued if status else -1, last)
        completed = _completed(seqs, status.last_completed if status else -1)
        view.progress.append(
            RankProgress(
                rank, enqueued, completed, entry.op if entry else "", entry.call_site() if entry else None
            )
        )
    windows = {r: (min(s), max(s)) for r, s in by_rank.items() if s}
    # The last collective each rank issued: its entries, or its pg_status where the entries were left
    # out (a dump of the active entries only leaves out what completed, a JSON one even the key).
    issued = {p.rank: p.last_enqueued for p in view.progress}
    where = group_name(pg, desc) + (f" of {RankSet.of(members).phrase()}" if shared_name else "")
    latest: dict[int, Entry] = {}
    # all_to_all's sizes are recorded from dump version 2.4 on (torch's analyzer checks them from there)
    totals = not absent and not unknown and all(_version_at_least(dumps[r].version, (2, 4)) for r in dumped)
    if windows:
        start = max(lo for lo, _ in windows.values())  # below it, some ring buffer has wrapped
        # Only the numbers some rank has (a hostile dump's 10**15 must not make 10**15 steps).
        for seq in sorted({n for numbered in by_rank.values() for n in numbered if n >= start}):
            present = {r: by_rank[r][seq] for r in dumped if seq in by_rank.get(r, {})}
            behind = [r for r in dumped if r not in present and r not in unknown and issued[r] < seq]
            if not present:
                continue
            if behind and not latest:  # where each rank is now: only needed to word a missing collective
                latest = latest_entries({r: dumps[r] for r in dumped})
            found = _judge_seq(pg, desc, seq, present, behind, by_rank, latest, issued, where)
            if found is None and totals and len(present) == len(members):
                found = _alltoall_totals(pg, desc, seq, present, where)
            if found is not None:
                view.divergence = found
                break
    if view.divergence is None and not absent:
        view.divergence = _not_started(pg, desc, by_rank, where)
    if view.divergence is None and absent and dumped:
        # as far as every rank that dumped has gone (one may have issued a collective more already)
        last = min((p.last_enqueued for p in view.progress), default=-1)
        view.divergence = Divergence(
            pg,
            desc,
            NO_DUMP,
            last,
            absent,
            f"{_ranks_word(absent)} of {where} left no flight-recorder dump; {_ranks_word(dumped)} agree "
            + (f"up to #{last}" if last >= 0 else "(no collective yet)"),
            [_side(absent, None)],
        )
    return view


def _not_started(pg: str, desc: str, by_rank: dict[int, dict[int, Ops]], where: str) -> Optional[Divergence]:
    """Every rank issued the group's last collective and none completed it, but some started it on the
    GPU and the others did not: NCCL marks a collective ``started`` (with TORCH_NCCL_ENABLE_TIMING=1)
    when its kernel begins, so a rank still ``scheduled`` there never reached it on its stream (a long
    or hung kernel before it) while the others wait in it for that rank. Without timing nothing is
    ``started`` and no rank is told apart (:func:`_scheduled_untimed`); gloo never says ``started``."""
    if not by_rank or not all(by_rank.values()):
        return None
    last = min(max(numbered) for numbered in by_rank.values())
    if any(max(numbered) != last for numbered in by_rank.values()):
        return None  # not every rank's last collective: the ranks disagree elsewhere, or some went on
    states = {rank: numbered[last][-1] for rank, numbered in by_rank.items()}
    if any(e.done or e.timed_out for e in states.values()):
        return None  # completed somewhere: each dump is taken at its own moment (docs/fr.md)
    started = sorted(r for r, e in states.items() if e.state == "started")
    waiting = sorted(r for r, e in states.items() if e.state == "scheduled")
    if not started or not waiting:
        return None
    entry = states[started[0]]
    text = (
        f"{_ranks_word(waiting)} never started {_describe(entry)} in {where} on the GPU, which "
        f"{_ranks_word(started)} started (waiting for {'it' if len(waiting) == 1 else 'them'}): the GPU work "
        "before it had not finished there (a long or hung kernel, a blocked stream)"
    )
    return Divergence(
        pg,
        desc,
        NOT_STARTED,
        last,
        waiting,
        text,
        [_side(started, entry), _side(waiting, states[waiting[0]])],
    )


def wrapped(dump: RankDump) -> bool:
    """Records were dropped from the start of this dump: cut to the limits, or torch's ring buffer
    wrapped (its first entry is not record 0, and it is not a dump of the active entries only, which
    leaves out what completed)."""
    if dump.entries_cut:
        return True
    first = min((e.record_id for e in dump.entries), default=0)
    return first > 0 and any(e.done for e in dump.entries)


def judge_p2p(dumps: dict[int, RankDump], notes: Optional[list[str]] = None) -> list[Divergence]:
    """Sends and receives between each pair of ranks, k-th send against k-th receive; not where either
    rank's records lost their start (the k-th kept is not the k-th issued), said in ``notes``."""
    sends: dict[tuple[str, int, int], list[Entry]] = {}
    recvs: dict[tuple[str, int, int], list[Entry]] = {}
    for rank, dump in dumps.items():
        for entry in dump.entries:
            if entry.peer is None:
                continue
            if entry.op == "send":
                sends.setdefault((entry.pg, rank, entry.peer), []).append(entry)
            elif entry.op == "recv":
                recvs.setdefault((entry.pg, entry.peer, rank), []).append(entry)
    found = []
    for pg, src, dst in sorted(set(sends) | set(recvs)):
        if src not in dumps or dst not in dumps:
            continue
        lost = [r for r in (src, dst) if wrapped(dumps[r])]
        if lost:
            if notes is not None:
                owners = " and ".join(f"rank {r}'s" for r in lost)
                note = (
                    f"sends and receives between ranks {min(src, dst)} and {max(src, dst)} not paired: {owners} "
                    f"ring buffer{'s' if len(lost) > 1 else ''} wrapped (the first ones kept are not the first issued)"
                )
                if note not in notes:
                    notes.append(note)
            continue
        out = sends.get((pg, src, dst), [])
        into = recvs.get((pg, src, dst), [])
        for index in range(max(len(out), len(into))):
            send = out[index] if index < len(out) else None
            recv = into[index] if index < len(into) else None
            text = ""
            if send is None and recv is not None:
                text = f"rank {dst} waits to receive from rank {src} ({_describe_p2p(recv)}), which sent nothing more"
                suspects = [src]
            elif recv is None and send is not None:
                text = (
                    f"rank {src} sent to rank {dst} ({_describe_p2p(send)}), which never posted the receive"
                )
                suspects = [dst]
            elif (
                send is not None
                and recv is not None
                and (send.sizes != recv.sizes or send.dtypes != recv.dtypes)
            ):
                text = (
                    f"rank {src} sent {_shape(send)} ({_describe_p2p(send)}) but rank {dst} receives "
                    f"{_shape(recv)} ({_describe_p2p(recv)})"
                )
                suspects = [src, dst]
            if text:
                sides = [_side([src], send), _side([dst], recv)]
                either = send if send is not None else recv
                number = either.p2p_seq if either is not None else 0
                found.append(Divergence(pg, "", P2P, number, suspects, text, sides))
                break
    return found


def _describe_p2p(entry: Entry) -> str:
    return f"{entry.op} #{entry.p2p_seq}{_from(entry.call_site())}"


def _unrecorded(dump: RankDump) -> int:
    """Operations counted (op_id) but not recorded: gloo's send/recv in torch 2.13."""
    ids = sorted({e.op_id for e in dump.entries if e.op_id > 0})
    if len(ids) < 2:
        return 0
    return (ids[-1] - ids[0] + 1) - len(ids)


def analyse(
    dumps: Sequence[RankDump],
    unreadable: Iterable[tuple[str, str]] = (),
    world_size: Optional[int] = None,
    refused: Optional[dict[int, str]] = None,
) -> FrReport:
    """The verdict over every rank's dump; ``refused``: ranks whose dump was there but not read, and why."""
    pair_status_ids(dumps)
    by_rank = {d.rank: d for d in dumps}
    world = world_of(dumps, world_size)
    if refused and not world_size:
        world = list(range(max([*world, *refused]) + 1))
    absent = [r for r in world if r not in by_rank]
    report = FrReport(
        headline="",
        ranks=str(RankSet.of(by_rank)),
        rank_list=sorted(by_rank),
        absent=absent,
        unreadable=[Unreadable(p, why) for p, why in unreadable],
        versions=sorted({d.version for d in dumps if d.version}),
    )
    if dumps and not any(d.entries or any(s.last_enqueued >= 0 for s in d.status) for d in dumps):
        report.empty = True
        report.recorder_on = any(d.groups_registered for d in dumps)
        ranks = _ranks_word(sorted(by_rank))
        report.headline = (
            f"the flight recorder is on but recorded no collective on {ranks}: none was issued before the dumps "
            "were taken (pg_config names their process groups)"
            if report.recorder_on
            else f"the flight recorder recorded nothing on {ranks}: it was not enabled — " + ENABLE_HINT
        )
        return report
    for dump in dumps:
        if dump.cut:
            report.notes.append(f"rank {dump.rank}'s dump was cut: " + "; ".join(dump.cut))
        report.notes.extend(dump.notes)
    groups = _groups(dumps, world)
    shared = {pg for pg, _, _, _ in groups if sum(1 for g in groups if g[0] == pg) > 1}
    for pg, desc, members, known in groups:
        view = judge_group(pg, desc, members, by_rank, pg in shared)
        unmatched(view, known, world, by_rank)
        report.groups.append(view)
        for rank in cut_away(pg, members, by_rank):
            report.notes.append(
                f"rank {rank}'s kept entries hold none of {group_name(pg, desc)}: not compared there"
            )
    divergences = [g.divergence for g in report.groups if g.divergence is not None]
    divergences.extend(judge_p2p(by_rank, report.notes))

    diverged = {d.pg for d in divergences if d.kind != NO_DUMP}

    def consequence(d: Divergence) -> bool:
        """Ranks missing from this group's collective because they wait in another group's divergence."""
        if d.kind != MISSING:
            return False
        for rank in d.suspects:
            entries = by_rank[rank].entries if rank in by_rank else []
            last = last_entry(entries) if entries else None
            if last is None or last.pg == d.pg or last.pg not in diverged or last.done:
                return False
        return True

    # A pipeline stage that stopped is in two of its pairs' divergences (what it never received, what
    # it never sent): the pair it is in most comes first, whatever the lowest rank's pair is.
    implicated = Counter(r for d in divergences if d.kind == P2P for r in d.suspects)

    def first_time(d: Divergence) -> tuple[int, int, int, int, int]:
        times = [
            e.time_ns
            for dump in by_rank.values()
            for e in dump.entries
            if e.pg == d.pg and (e.seq == d.seq and not e.is_p2p or d.kind == P2P and e.is_p2p)
        ]
        # A cycle (each group's missing ranks wait in the other's) puts the more specific subgroup first.
        return (
            1 if d.kind == NO_DUMP else 0,
            1 if consequence(d) else 0,
            1 if d.pg_desc == DEFAULT_PG else 0,
            -max((implicated[r] for r in d.suspects), default=0) if d.kind == P2P else 0,
            min(times) if times else 1 << 62,
        )

    for divergence in divergences:
        if divergence.kind != NO_DUMP and any(
            x.op and x.call_site is None and not x.frames for x in divergence.sides
        ):
            divergence.no_call_sites = True
            frameless = [r for x in divergence.sides if x.op and not x.frames for r in x.rank_list]
            json_only = all(by_rank[r].json for r in frameless if r in by_rank)
            divergence.text += NO_CALL_SITES if json_only else NO_STACKS
    report.divergences = sorted(divergences, key=first_time)
    report.desync = any(d.kind != NO_DUMP for d in report.divergences)
    if len(dumps) == 1:
        report.recent = recent_entries(dumps[0])
    untimed = [d.rank for d in dumps if _scheduled_untimed(d)]
    if untimed:
        report.notes.append(
            f"{_ranks_word(untimed)}: the last NCCL collective is `scheduled`, but NCCL's recorder marks a "
            "collective started only with TORCH_NCCL_ENABLE_TIMING=1 (not on in this job: no entry was "
            "timed), so it may have been running on the GPU, waiting for other ranks, or not yet started"
        )
    for dump in dumps:
        hidden = _unrecorded(dump)
        if hidden:
            report.notes.append(
                f"rank {dump.rank} issued {hidden} operation{'s' if hidden > 1 else ''} the recorder did not keep "
                "(gaps in op_id: gloo records no send/recv in torch 2.13)"
            )
    report.refused = [Refused(rank, why) for rank, why in sorted((refused or {}).items())]
    report.alone = _alone(dumps, world)
    report.headline = headline(report)
    return report


def _alone(dumps: Sequence[RankDump], world: Sequence[int]) -> bool:
    """One dump whose rank is the whole job: every process group its dump names (NCCL's pg_config; gloo's
    names none) has that rank alone, and no larger world is known."""
    if len(dumps) != 1 or not dumps[0].group_ranks:
        return False
    rank = dumps[0].rank
    return list(world) == [rank] and all(list(m) == [rank] for m in dumps[0].group_ranks.values())


def _scheduled_untimed(dump: RankDump) -> bool:
    """The rank's last NCCL entry did not complete and says `scheduled`, and nothing in the dump was
    timed: without TORCH_NCCL_ENABLE_TIMING the recorder never sees a start (pg_status's
    last_started_collective stays -1), so `scheduled` does not tell running from waiting."""
    nccl = [e for e in dump.entries if e.backend == "nccl" and not e.is_p2p]
    if not nccl:
        return False
    last = max(nccl, key=lambda e: e.record_id)
    timed = any(e.duration_ms is not None or e.state == "started" for e in nccl)
    return not last.done and not last.timed_out and last.state == "scheduled" and not timed


#: The state of an entry its backend's watchdog retired without seeing it complete.
TIMED_OUT = "timed out (retired, never completed)"

#: How many of a lone dump's last entries the report lists.
RECENT = 10


def recent_entries(dump: RankDump, count: int = RECENT) -> list[RecentEntry]:
    """A rank's last ``count`` entries (record order), with their own state and durations."""
    last = sorted(dump.entries, key=lambda e: e.record_id)[-count:]
    return [
        RecentEntry(
            seq=e.p2p_seq if e.is_p2p else e.seq,
            op=e.op,
            group=group_name(e.pg, e.pg_desc),
            state="completed" if e.done else TIMED_OUT if e.timed_out else (e.state or "scheduled"),
            sizes=[list(s) for s in e.sizes],
            dtypes=list(e.dtypes),
            call_site=e.call_site(),
            duration_ms=e.duration_ms,
            discovered_ms=e.discovered_ms,
        )
        for e in last
    ]


def headline(report: FrReport) -> str:
    parts = []
    for refused in report.refused:
        parts.append(f"rank {refused.rank}'s dump was refused ({refused.reason}): look at it first")
    refused_ranks = {x.rank for x in report.refused}
    silent = [r for r in report.absent if r not in refused_ranks]
    if silent:
        parts.append(
            f"{_ranks_word(silent)} left no flight-recorder dump: look at {'them' if len(silent) > 1 else 'it'} "
            "first (dead, or never dumped)"
        )
    real = [d for d in report.divergences if d.kind != NO_DUMP]
    # what the ranks that dumped agree on, where some did not: "ranks 0-1,3 agree up to #6" (the first group's)
    agreed = [d.text.partition("; ")[2] for d in report.divergences if d.kind == NO_DUMP] if silent else []
    if real:
        parts.append(real[0].text)
    elif agreed and agreed[0] and len(report.rank_list) > 1:
        parts.append(agreed[0])
    elif report.alone:
        parts.append(_alone_words(report))
    elif len(report.rank_list) == 1:
        rank = report.rank_list[0]
        parts.append(
            f"only rank {rank}'s dump: nothing to compare it with — a desync needs every rank's dump; "
            f"below is what rank {rank}'s recorder shows"
        )
    elif not report.absent:
        lasts = sorted({p.last_completed for g in report.groups for p in g.progress})
        parts.append(
            f"no desync: {_ranks_word(report.rank_list)} issued the same collectives"
            + (f" (last completed #{lasts[-1]})" if lasts and lasts[-1] >= 0 else " (none completed)")
        )
    return "; ".join(parts)


def _alone_words(report: FrReport) -> str:
    """The verdict of a one-rank job's dump: no rank to wait for, so what held its last collective is
    in the rank itself."""
    rank = report.rank_list[0]
    whole = (
        f"rank {rank} is the whole job (its process groups have no other member): no other rank to wait for"
    )
    pending = [p for g in report.groups for p in g.progress if p.last_enqueued > p.last_completed]
    if not pending:
        return whole + "; every collective it issued completed"
    last = pending[0]
    where = place(last.call_site)
    return (
        f"{whole}; its #{last.last_enqueued} {last.op or 'collective'}{' from ' + where if where else ''} never "
        "completed: what held it is in the rank itself, its GPU busy with earlier work or its process "
        "(`rankscope why` or `rankscope stacks --native` while it hangs)"
    )

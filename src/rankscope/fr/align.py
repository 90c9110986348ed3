"""Align every rank's flight-recorder entries per process group and judge the first divergence (pure).

Per group, the collectives of every member rank are lined up by ``collective_seq_id``. The first
sequence number where ranks disagree is the divergence: a different op, other sizes or dtypes, the
same op issued from another line (gloo pairs such calls silently: wrong sums before the hang), or
ranks that never issued it. One entry of look-ahead tells an extra collective (the odd ranks' next
one is the others' one) from a skipped one (the others' next one is the odd ranks' one). Members that
left no dump are named first: their records are the ones nobody can see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Optional

from rankscope.folding import fold_ints
from rankscope.fr.records import Entry, RankDump
from rankscope.fr.report import (
    CALL_SITE,
    DTYPE,
    EXTRA,
    MISSING,
    NO_DUMP,
    OP,
    P2P,
    SIZE,
    SKIPPED,
    Divergence,
    FrReport,
    GroupView,
    RankProgress,
    RecentEntry,
    Side,
    Unreadable,
)
from rankscope.model import Frame

DEFAULT_PG = "default_pg"

#: The variables that turn the recorder on (torch 2.13 records by default; TORCH_FR_BUFFER_SIZE=0 turns it off;
#: older releases record only with a size, and before 2.5 under the NCCL names).
ENABLE_HINT = (
    "set TORCH_FR_BUFFER_SIZE=2000 (torch < 2.5: TORCH_NCCL_TRACE_BUFFER_SIZE=2000) in every rank's "
    "environment; TORCH_FR_DUMP_TEMP_FILE=/some/dir/rank_ names the files torch writes on an NCCL watchdog "
    "timeout (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE)"
)

Key = tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...], Optional[tuple[str, str, int]]]


def _ranks_word(ranks: Sequence[int]) -> str:
    return f"{'ranks' if len(ranks) > 1 else 'rank'} {fold_ints(ranks)}"


def place(frame: Optional[Frame]) -> str:
    """``log_global_loss (train.py:22)``; a module-level call is just ``train.py:37``."""
    if frame is None:
        return ""
    where = f"{frame.short_filename}:{frame.line}"
    if frame.function in ("<module>", ""):
        return where
    return f"{frame.function} ({where})"


def _from(frame: Optional[Frame]) -> str:
    return f" from {place(frame)}" if frame is not None else ""


def _site_key(entry: Entry) -> Optional[tuple[str, str, int]]:
    site = entry.call_site()
    return (site.function, site.filename, site.line) if site is not None else None


def _key(entry: Entry) -> Key:
    return (entry.op, entry.sizes, entry.dtypes, _site_key(entry))


def _side(ranks: Sequence[int], entry: Optional[Entry], completed: Optional[bool] = None) -> Side:
    if entry is None:
        return Side(fold_ints(ranks), sorted(ranks))
    return Side(
        ranks=fold_ints(ranks),
        rank_list=sorted(ranks),
        op=entry.op,
        seq=entry.seq,
        sizes=[list(s) for s in entry.sizes],
        dtypes=list(entry.dtypes),
        call_site=entry.call_site(),
        frames=list(entry.frames),
        completed=completed,
    )


def _shape(entry: Entry) -> str:
    sizes = ", ".join("x".join(str(d) for d in s) or "scalar" for s in entry.sizes)
    return f"[{sizes}] {'/'.join(entry.dtypes)}".strip() if entry.sizes else "no tensors"


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


def _groups(dumps: Sequence[RankDump], world: Sequence[int]) -> dict[str, tuple[str, list[int]]]:
    """pg name -> (desc, member ranks)."""
    named: dict[str, list[int]] = {}
    descs: dict[str, str] = {}
    seen: dict[str, set[int]] = {}
    for dump in dumps:
        for name, members in dump.group_ranks.items():
            named.setdefault(name, members)
        for name, desc in dump.group_desc.items():
            if desc:
                descs.setdefault(name, desc)
        for entry in dump.entries:
            seen.setdefault(entry.pg, set()).add(dump.rank)
            if entry.pg_desc:
                descs.setdefault(entry.pg, entry.pg_desc)
        for status in dump.status:
            seen.setdefault(status.pg, set()).add(dump.rank)
    groups = {}
    for name in sorted(seen, key=lambda n: (len(n), n)):
        desc = descs.get(name, "")
        if name in named:
            members = sorted(named[name])
        elif desc == DEFAULT_PG or (not desc and name == "0"):
            members = list(world)
        else:
            members = sorted(seen[name])
        groups[name] = (desc, members)
    return groups


def _group_name(pg: str, desc: str) -> str:
    if desc == DEFAULT_PG:
        return "the default group"
    if desc and desc != "undefined":
        return f"group {pg} ({desc})"
    return f"group {pg}"


def _lookahead(
    odd: Sequence[int],
    rest: Sequence[int],
    seq: int,
    by_rank: dict[int, dict[int, Entry]],
    rest_key: Key,
    odd_key: Key,
) -> Optional[str]:
    """EXTRA when every odd rank's next collective is what the others issued here; SKIPPED when the
    others' next is what the odd ranks issued here; None when the records cannot tell."""
    odd_next = [by_rank[r].get(seq + 1) for r in odd]
    if odd_next and all(e is not None and _key(e) == rest_key for e in odd_next):
        return EXTRA
    rest_next = [by_rank[r].get(seq + 1) for r in rest]
    if rest_next and all(e is not None and _key(e) == odd_key for e in rest_next):
        return SKIPPED
    return None


def _mismatch_kind(a: Entry, b: Entry) -> str:
    if a.op != b.op:
        return OP
    if a.sizes != b.sizes:
        return SIZE
    if a.dtypes != b.dtypes:
        return DTYPE
    return CALL_SITE


def _describe(entry: Entry) -> str:
    return f"{entry.op} #{entry.seq}{_from(entry.call_site())}"


def _judge_seq(
    pg: str,
    desc: str,
    seq: int,
    present: dict[int, Entry],
    behind: list[int],
    by_rank: dict[int, dict[int, Entry]],
    latest: dict[int, Entry],
) -> Optional[Divergence]:
    where = _group_name(pg, desc)
    keys = {r: _key(e) for r, e in present.items()}
    counts = Counter(keys.values())
    if len(counts) > 1:
        # The largest set of ranks that agree is "the others"; a tie leaves no odd one out (lowest rank first).
        ordered = sorted(counts, key=lambda k: (-counts[k], min(r for r, kk in keys.items() if kk == k)))
        majority = ordered[0]
        rest = sorted(r for r, k in keys.items() if k == majority)
        odd = sorted(r for r, k in keys.items() if k != majority)
        rest_entry = present[rest[0]]
        odd_entry = present[odd[0]]
        sides = [_side(rest, rest_entry, all(present[r].done for r in rest))]
        for other in ordered[1:]:
            ranks = sorted(r for r, k in keys.items() if k == other)
            sides.append(_side(ranks, present[ranks[0]], all(present[r].done for r in ranks)))
        tie = counts[majority] == counts[ordered[1]]
        kind = _mismatch_kind(odd_entry, rest_entry)
        shape = _lookahead(odd, rest, seq, by_rank, majority, keys[odd[0]]) if len(ordered) == 2 else None
        # Two equal camps: the one whose next collective is the other's current one issued the extra.
        swap = tie and len(ordered) == 2 and shape != EXTRA
        if swap and _lookahead(rest, odd, seq, by_rank, keys[odd[0]], majority) == EXTRA:
            odd, rest, shape = rest, odd, EXTRA
            rest_entry, odd_entry = present[rest[0]], present[odd[0]]
        if shape == EXTRA:
            text = (
                f"{_ranks_word(odd)} issued an extra {_describe(odd_entry)} in {where}; "
                f"{_ranks_word(rest)} issued {_describe(rest_entry)}"
            )
            kind = EXTRA
        elif shape == SKIPPED:
            text = (
                f"{_ranks_word(odd)} skipped {_describe(rest_entry)} in {where}, which {_ranks_word(rest)} issued; "
                f"{'they' if len(odd) > 1 else 'it'} issued {_describe(odd_entry)} instead"
            )
            kind = SKIPPED
        else:
            what = {
                OP: "different collectives",
                SIZE: "different sizes",
                DTYPE: "different dtypes",
                CALL_SITE: "the same collective from different lines (paired with each other: wrong results)",
            }[kind]
            in_order = sorted(sides, key=lambda s: s.rank_list[0]) if tie else sides[1:] + sides[:1]
            parts = []
            for side in in_order:
                entry = present[side.rank_list[0]]
                tensors = f" with {_shape(entry)}" if kind in (SIZE, DTYPE) else ""
                parts.append(f"{_ranks_word(side.rank_list)} issued {_describe(entry)}{tensors}")
            text = f"collective #{seq} of {where}: {what}: " + "; ".join(parts)
            if tie:
                odd = sorted(present)
        return Divergence(pg, desc, kind, seq, odd, text, sides)
    if behind:
        entry = next(iter(present.values()))
        done = sorted(present)
        lasts = {r: max(by_rank[r], default=0) for r in behind}
        last_words = "; ".join(
            f"{_ranks_word([r for r in behind if lasts[r] == last])} last issued "
            + (f"#{last}" if last else "nothing")
            for last in sorted(set(lasts.values()))
        )
        for rank in behind:
            now = latest.get(rank)
            if now is not None and now.pg != pg and not now.done:
                last_words += f"; rank {rank} waits in {_describe(now)} of {_group_name(now.pg, now.pg_desc)}"
        text = (
            f"{_ranks_word(behind)} never issued {_describe(entry)} in {where}, which {_ranks_word(done)} "
            f"issued ({'completed' if all(e.done for e in present.values()) else 'waiting'}); {last_words}"
        )
        sides = [_side(done, entry, all(e.done for e in present.values()))]
        missing = _side(behind, None)
        missing.last_seq = min(lasts.values())
        sides.append(missing)
        return Divergence(pg, desc, MISSING, seq, sorted(behind), text, sides)
    return None


def latest_entries(dumps: dict[int, RankDump]) -> dict[int, Entry]:
    """Each rank's most recent entry (any group): where it is now, when not retired."""
    return {
        rank: max(dump.entries, key=lambda e: (e.time_ns, e.record_id))
        for rank, dump in dumps.items()
        if dump.entries
    }


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


def _completed(seqs: dict[int, Entry], reported: int) -> int:
    """The last collective a rank completed in a group, by its entries' own state (pg_status lags:
    NCCL's said -1 beside seven entries marked completed); pg_status only for what lies before
    the entries kept (-1: none)."""
    done = [s for s, e in seqs.items() if e.done]
    if done:
        return max(done)
    return min(reported, min(seqs) - 1) if seqs else reported


def number(seq: int, none: str = "nothing") -> str:
    """``#7``; ``none`` for the -1 that means "no collective" (never printed as a number)."""
    return f"#{seq}" if seq >= 0 else none


def judge_group(pg: str, desc: str, members: Sequence[int], dumps: dict[int, RankDump]) -> GroupView:
    unknown = set(cut_away(pg, members, dumps))
    dumped = [r for r in members if r in dumps]
    absent = [r for r in members if r not in dumps]
    by_rank: dict[int, dict[int, Entry]] = {}
    for rank in dumped:
        by_rank[rank] = {e.seq: e for e in dumps[rank].entries if e.pg == pg and not e.is_p2p and e.seq > 0}
    view = GroupView(pg, desc, fold_ints(members), list(members), absent=absent)
    for rank in dumped:
        status = dumps[rank].status_of(pg)
        seqs = by_rank[rank]
        last = max(seqs, default=-1)
        entry = seqs.get(last)
        enqueued = max(status.last_enqueued if status else -1, last)
        completed = _completed(seqs, status.last_completed if status else -1)
        view.progress.append(
            RankProgress(
                rank, enqueued, completed, entry.op if entry else "", entry.call_site() if entry else None
            )
        )
    windows = {r: (min(s), max(s)) for r, s in by_rank.items() if s}
    latest: dict[int, Entry] = {}
    if windows:
        start = max(lo for lo, _ in windows.values())  # below it, some ring buffer has wrapped
        end = max(hi for _, hi in windows.values())
        for seq in range(start, end + 1):
            present = {r: by_rank[r][seq] for r in dumped if seq in by_rank.get(r, {})}
            behind = [
                r for r in dumped if r not in present and r not in unknown and windows.get(r, (0, 0))[1] < seq
            ]
            if not present:
                continue
            if behind and not latest:  # where each rank is now: only needed to word a missing collective
                latest = latest_entries({r: dumps[r] for r in dumped})
            found = _judge_seq(pg, desc, seq, present, behind, by_rank, latest)
            if found is not None:
                view.divergence = found
                break
    if view.divergence is None and absent and dumped:
        where = _group_name(pg, desc)
        last = max((p.last_enqueued for p in view.progress), default=-1)
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


def judge_p2p(dumps: dict[int, RankDump]) -> list[Divergence]:
    """Sends and receives between each pair of ranks, k-th send against k-th receive."""
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
    dumps: Sequence[RankDump], unreadable: Iterable[tuple[str, str]] = (), world_size: Optional[int] = None
) -> FrReport:
    """The verdict over every rank's dump."""
    by_rank = {d.rank: d for d in dumps}
    world = world_of(dumps, world_size)
    absent = [r for r in world if r not in by_rank]
    report = FrReport(
        headline="",
        ranks=fold_ints(by_rank),
        rank_list=sorted(by_rank),
        absent=absent,
        unreadable=[Unreadable(p, why) for p, why in unreadable],
        versions=sorted({d.version for d in dumps if d.version}),
    )
    if dumps and not any(d.entries for d in dumps):
        report.empty = True
        report.headline = (
            f"the flight recorder recorded nothing on {_ranks_word(sorted(by_rank))}: it was not enabled — "
            + ENABLE_HINT
        )
        return report
    for dump in dumps:
        if dump.cut:
            report.notes.append(f"rank {dump.rank}'s dump was cut: " + "; ".join(dump.cut))
    for pg, (desc, members) in _groups(dumps, world).items():
        report.groups.append(judge_group(pg, desc, members, by_rank))
        for rank in cut_away(pg, members, by_rank):
            report.notes.append(
                f"rank {rank}'s kept entries hold none of {_group_name(pg, desc)}: not compared there"
            )
    divergences = [g.divergence for g in report.groups if g.divergence is not None]
    divergences.extend(judge_p2p(by_rank))

    diverged = {d.pg for d in divergences if d.kind != NO_DUMP}

    def consequence(d: Divergence) -> bool:
        """Ranks missing from this group's collective because they wait in another group's divergence."""
        if d.kind != MISSING:
            return False
        for rank in d.suspects:
            entries = by_rank[rank].entries if rank in by_rank else []
            last = max(entries, key=lambda e: e.record_id, default=None)
            if last is None or last.pg == d.pg or last.pg not in diverged or last.done:
                return False
        return True

    def first_time(d: Divergence) -> tuple[int, int, int, int]:
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
            min(times) if times else 1 << 62,
        )

    report.divergences = sorted(divergences, key=first_time)
    report.desync = any(d.kind != NO_DUMP for d in report.divergences)
    if len(dumps) == 1:
        report.recent = recent_entries(dumps[0])
    for dump in dumps:
        hidden = _unrecorded(dump)
        if hidden:
            report.notes.append(
                f"rank {dump.rank} issued {hidden} operation{'s' if hidden > 1 else ''} the recorder did not keep "
                "(gaps in op_id: gloo records no send/recv in torch 2.13)"
            )
    report.headline = _headline(report)
    return report


#: How many of a lone dump's last entries the report lists.
RECENT = 10


def recent_entries(dump: RankDump, count: int = RECENT) -> list[RecentEntry]:
    """A rank's last ``count`` entries (record order), with their own state and durations."""
    last = sorted(dump.entries, key=lambda e: e.record_id)[-count:]
    return [
        RecentEntry(
            seq=e.p2p_seq if e.is_p2p else e.seq,
            op=e.op,
            group=_group_name(e.pg, e.pg_desc),
            state="completed" if e.done else (e.state or "scheduled"),
            sizes=[list(s) for s in e.sizes],
            dtypes=list(e.dtypes),
            call_site=e.call_site(),
            duration_ms=e.duration_ms,
            discovered_ms=e.discovered_ms,
        )
        for e in last
    ]


def _headline(report: FrReport) -> str:
    parts = []
    if report.absent:
        parts.append(
            f"{_ranks_word(report.absent)} left no flight-recorder dump: look at {'them' if len(report.absent) > 1 else 'it'} "
            "first (dead, or never dumped)"
        )
    real = [d for d in report.divergences if d.kind != NO_DUMP]
    if real:
        parts.append(real[0].text)
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

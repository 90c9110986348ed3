"""Dumps as torch's NCCL recorder writes them in the field, across versions, built here by generators
(plain dicts, lists, strings and numbers, as torch pickles them; the values are ours, the shapes are
torch's): JSON dumps of only the active entries, whose ``entries`` key is absent when none is active;
``pg_status`` keyed by the process group's ``pg_id`` where the entries name it by its name; version 1.x
dumps (``seq_id``, ``pg_id``, ``pg_config`` as ``{pg_id: [ranks]}``); NCCL's point-to-point names
(``nccl:send 0->1``, ``nccl:recv 1<-0``, both in group ranks); groups of ``split_group`` that share one
name; a dump cut short by a rank that died while writing it. No GPU or NCCL job runs: docs/fr.md says
which torch sources show each shape.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any, Optional

import pytest
from tests.support.cli import run_cli

from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.fr.report import MISSING, NO_DUMP, NOT_STARTED, P2P, FrReport

FRAMES = [
    {"name": "all_reduce", "filename": "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",
     "line": 2950},
    {"name": "train_step", "filename": "/job/train.py", "line": 40},
]  # fmt: skip


def entry(seq: int, op: str = "all_reduce", pg: tuple[str, str] = ("0", "default_pg"), pg_id: int = 0,
          state: str = "completed", p2p_seq: int = 0, size: int = 1024, record: Optional[int] = None,
          frames: bool = True) -> dict[str, Any]:  # fmt: skip
    """One entry as torch >= 2.5 writes it (version 2.x): NCCL leaves ``retired`` false beside ``completed``."""
    is_p2p = op.startswith(("send", "recv"))
    found: dict[str, Any] = {
        "record_id": record if record is not None else seq + p2p_seq,
        "pg_id": pg_id,
        "process_group": pg,
        "thread_name": "pt_main_thread",
        "thread_id": "139872",
        "collective_seq_id": 0 if is_p2p else seq,
        "p2p_seq_id": p2p_seq,
        "op_id": seq + p2p_seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": 1_700_000_000_000_000_000 + (seq + p2p_seq) * 1000,
        "input_sizes": [[size]],
        "input_dtypes": ["Float"],
        "output_sizes": [[size]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": False,
        "timeout_ms": 600000,
        "is_p2p": is_p2p,
    }
    if frames:
        found["frames"] = FRAMES
    return found


def status(enqueued: int, completed: int, as_text: bool = False) -> dict[str, Any]:
    values = {"last_enqueued_collective": enqueued, "last_started_collective": enqueued,
              "last_completed_collective": completed}  # fmt: skip
    return {k: str(v) for k, v in values.items()} if as_text else values


def config(*groups: tuple[str, str, list[int]]) -> dict[str, Any]:
    return {name: {"name": name, "desc": desc, "ranks": str(ranks)} for name, desc, ranks in groups}


def document(entries: Optional[list[dict[str, Any]]], pg_status: dict[str, Any],
             pg_config: dict[str, Any], version: str = "2.10") -> dict[str, Any]:  # fmt: skip
    """A whole dump; ``entries`` None: the key is absent, as in a JSON dump with nothing active."""
    found: dict[str, Any] = {"version": version, "pg_config": pg_config, "pg_status": pg_status}
    if tuple(int(n) for n in version.split(".")) >= (2, 8):  # before: nccl_version
        found["comm_lib_version"] = "2.21.5"
    if entries is not None:
        found["entries"] = entries
    return found


def write(directory: Path, rank: int, dump: dict[str, Any], as_json: bool = False) -> Path:
    path = directory / (f"nccl_trace_rank_{rank}.json" if as_json else f"nccl_trace_rank_{rank}")
    if as_json:
        path.write_text(json.dumps(dump))
    else:
        path.write_bytes(pickle.dumps(dump))
    return path


def judge(directory: Path) -> FrReport:
    collected = read_dumps(directory)
    return analyse(collected.dumps, collected.unreadable, refused=collected.refused)


WORLD2 = config(("0", "default_pg", [0, 1]))


def test_a_json_dump_of_only_active_entries_with_none_active_is_read_from_its_pg_status(
    tmp_path: Path,
) -> None:
    # _dump_fr_trace_json(True, True) on NCCL: rank 0 completed every collective, so its dump has no
    # "entries" key at all; rank 1 still waits in #6, which rank 0 never enqueued (its pg_status says #5).
    write(tmp_path, 0, document(None, {"0": status(5, 5, as_text=True)}, WORLD2), as_json=True)
    waiting = [{**entry(6, state="scheduled"), "time_discovered_started_ns": 0,
                "time_discovered_completed_ns": 0}]  # fmt: skip
    del waiting[0]["frames"]
    write(tmp_path, 1, document(waiting, {"0": status(6, 5, as_text=True)}, WORLD2), as_json=True)
    report = judge(tmp_path)
    assert report.rank_list == [0, 1] and not report.refused and not report.empty
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 6, [0])
    assert first.text.startswith(
        "rank 0 never issued all_reduce #6 in the default group, which rank 1 issued (waiting); rank 0 last issued #5"
    )


def test_only_active_dumps_where_every_collective_completed_are_no_desync_not_a_disabled_recorder(
    tmp_path: Path,
) -> None:
    for rank in (0, 1):
        write(tmp_path, rank, document(None, {"0": status(9, 9, as_text=True)}, WORLD2), as_json=True)
    report = judge(tmp_path)
    assert not report.empty and not report.desync
    assert report.headline == "no desync: ranks 0-1 issued the same collectives (last completed #9)"
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "ranks 0-1: enqueued #9, completed #9" in result.stdout


def test_a_rank_whose_completed_entries_were_left_out_is_not_taken_for_one_that_never_issued_them(
    tmp_path: Path,
) -> None:
    # onlyActive pickles: rank 0 still shows #6 and #7 as active; rank 1 completed #6 already (left
    # out) and waits in #7. Nobody skipped anything.
    write(tmp_path, 0, document([entry(6, state="started"), entry(7, state="scheduled")],
                                {"0": status(7, 5)}, WORLD2))  # fmt: skip
    write(tmp_path, 1, document([entry(7, state="scheduled")], {"0": status(7, 6)}, WORLD2))
    report = judge(tmp_path)
    assert not report.desync, report.headline
    # Rank 1 left out even its only active entry: its pg_status still says it enqueued #7.
    write(tmp_path, 1, document(None, {"0": status(7, 7)}, WORLD2))
    report = judge(tmp_path)
    assert report.rank_list == [0, 1] and not report.refused
    assert not report.desync, report.headline
    # Had its pg_status stopped at #6, rank 1 never issued #7: that is said.
    write(tmp_path, 1, document(None, {"0": status(6, 6)}, WORLD2))
    first = judge(tmp_path).divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 7, [1])
    assert first.text.endswith("rank 1 last issued #6")


def test_pg_status_keyed_by_pg_id_is_matched_to_the_group_the_entries_name(tmp_path: Path) -> None:
    # A group made with group_name="tp": entries say ("tp", "tensor_parallel"), pg_status keys it by
    # its pg_id "1". Rank 1 has no active entry in "tp" but enqueued its #3 (pg_status): not missing,
    # and no group "1" appears beside "tp".
    tp = ("tp", "tensor_parallel")
    groups = config(("0", "default_pg", [0, 1]), ("tp", "tensor_parallel", [0, 1]))
    write(tmp_path, 0, document([entry(4), entry(3, pg=tp, pg_id=1, state="scheduled", record=5)],
                                {"0": status(4, 4), "1": status(3, 2)}, groups))  # fmt: skip
    write(tmp_path, 1, document([entry(4)], {"0": status(4, 4), "1": status(3, 3)}, groups))
    report = judge(tmp_path)
    assert [g.pg for g in report.groups] == ["0", "tp"]
    assert not report.desync, report.headline
    progress = {p.rank: (p.last_enqueued, p.last_completed) for p in report.groups[1].progress}
    assert progress == {0: (3, 2), 1: (3, 3)}


def test_pg_ids_a_rank_cannot_pair_itself_are_paired_as_the_other_ranks_pair_them(tmp_path: Path) -> None:
    # Only the active entries: rank 1 completed everything, so nothing in its dump pairs pg_status's
    # "1" and "2" with "tp" and "pp"; rank 0's entries do (both ranks made the same groups).
    tp, pp = ("tp", "tensor_parallel"), ("pp", "pipeline")
    groups = config(
        ("0", "default_pg", [0, 1]), ("tp", "tensor_parallel", [0, 1]), ("pp", "pipeline", [0, 1])
    )
    active = [entry(3, pg=tp, pg_id=1, state="scheduled"), entry(5, pg=pp, pg_id=2, state="scheduled")]
    write(tmp_path, 0, document(active, {"0": status(4, 4), "1": status(3, 2), "2": status(5, 4)}, groups))
    write(tmp_path, 1, document(None, {"0": status(4, 4), "1": status(3, 3), "2": status(5, 5)}, groups))
    report = judge(tmp_path)
    assert [g.pg for g in report.groups] == ["0", "pp", "tp"]
    assert not report.desync, report.headline
    # Had rank 1 stopped before pp's #5, it would be named.
    write(tmp_path, 1, document(None, {"0": status(4, 4), "1": status(3, 3), "2": status(4, 4)}, groups))
    first = judge(tmp_path).divergences[0]
    assert (first.pg, first.kind, first.seq, first.suspects) == ("pp", MISSING, 5, [1])


def test_a_version_1_dump_names_its_groups_members_in_the_old_pg_config(tmp_path: Path) -> None:
    # torch 2.2-2.3 (version "1.x"): seq_id and pg_id, no process_group, pg_config {pg_id: [ranks]}.
    def old(seq: int, pg_id: int, op: str = "all_reduce") -> dict[str, Any]:
        return {"record_id": seq, "pg_id": pg_id, "seq_id": seq, "op_id": seq,
                "profiling_name": f"nccl:{op}", "time_created_ns": seq, "input_sizes": [[8]],
                "output_sizes": [[8]], "state": "scheduled", "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None, "retired": False, "frames": FRAMES}  # fmt: skip

    pg_config = {0: [0, 1, 2], 1: [0, 1]}
    # The version 2.7 name of comm_lib_version is read too.
    seven = read_dumps(
        write(tmp_path, 0, {**document([entry(1)], {}, WORLD2, "2.7"), "nccl_version": "2.21.5"})
    )
    assert seven.dumps[0].comm_lib_version == "2.21.5"
    write(tmp_path, 0, {"version": "1.4", "pg_config": pg_config, "entries": [old(1, 0), old(1, 1)]})
    write(tmp_path, 1, {"version": "1.4", "pg_config": pg_config, "entries": [old(1, 0)]})
    write(tmp_path, 2, {"version": "1.4", "pg_config": pg_config, "entries": [old(1, 0)]})
    report = judge(tmp_path)
    assert [(g.pg, g.members) for g in report.groups] == [("0", "0-2"), ("1", "0-1")]
    first = report.divergences[0]
    assert (first.pg, first.kind, first.seq, first.suspects) == ("1", MISSING, 1, [1])


def _p2p(rank: int, ops: list[tuple[str, int]], pg: tuple[str, str] = ("0", "default_pg"),
         pg_config: dict[str, Any] = WORLD2) -> dict[str, Any]:  # fmt: skip
    """A rank's NCCL send/recv entries as torch names them: ``send <me>-><peer>``, ``recv <me><-<peer>``."""
    entries = [entry(0, op=name, pg=pg, p2p_seq=i + 1, size=size, state="scheduled") for i, (name, size) in
               enumerate(ops)]  # fmt: skip
    return document(entries, {}, pg_config)


def test_nccl_receives_named_with_the_arrow_torch_writes_pair_with_their_sends(tmp_path: Path) -> None:
    write(tmp_path, 0, _p2p(0, [("send 0->1", 64), ("recv 0<-1", 64)]))
    write(tmp_path, 1, _p2p(1, [("recv 1<-0", 64), ("send 1->0", 64)]))
    report = judge(tmp_path)
    assert not report.desync, report.headline
    write(tmp_path, 1, _p2p(1, [("recv 1<-0", 64)]))
    report = judge(tmp_path)
    assert [(d.kind, d.suspects) for d in report.divergences] == [(P2P, [1])]
    assert report.divergences[0].text.startswith("rank 0 waits to receive from rank 1 (recv #2")


def test_p2p_peers_in_a_subgroup_are_group_ranks_and_named_as_global_ranks(tmp_path: Path) -> None:
    # Pipeline stages 2 and 3 in group "pp" (ranks [2, 3]): rank 2 is group rank 0, rank 3 group rank 1.
    pp = ("pp", "pipeline")
    groups = config(("0", "default_pg", [0, 1, 2, 3]), ("pp", "pipeline", [2, 3]))
    for rank in (0, 1):
        write(tmp_path, rank, document([entry(1)], {"0": status(1, 1)}, groups))
    write(tmp_path, 2, {**_p2p(2, [("send 0->1", 64), ("send 0->1", 64)], pp, groups),
                        "entries": [entry(1, record=0), *_p2p(2, [("send 0->1", 64), ("send 0->1", 64)], pp)["entries"]]})  # fmt: skip
    write(tmp_path, 3, {**_p2p(3, [("recv 1<-0", 64)], pp, groups),
                        "entries": [entry(1, record=0), *_p2p(3, [("recv 1<-0", 64)], pp)["entries"]]})  # fmt: skip
    report = judge(tmp_path)
    assert [(d.kind, d.suspects) for d in report.divergences] == [(P2P, [3])]
    assert report.divergences[0].text.startswith(
        "rank 2 sent to rank 3 (send #2 from train_step (train.py:40))"
    )


def test_the_pipeline_stage_that_stopped_heads_the_verdict_not_the_lowest_pair(tmp_path: Path) -> None:
    """Four stages; stage 2 took two microbatches of three and passed them on, then stopped: rank 1's
    third send is never received (so rank 1 never posts the receive of rank 0's fourth), and rank 3's
    third receive is never sent. Rank 2 is in two of the three divergences and heads the verdict,
    though rank 0's pair is the lowest and the first in time."""
    world4 = config(("0", "default_pg", [0, 1, 2, 3]))
    write(tmp_path, 0, _p2p(0, [("send 0->1", 64)] * 4, pg_config=world4))
    write(tmp_path, 1, _p2p(1, [("recv 1<-0", 64), ("send 1->2", 64)] * 3, pg_config=world4))
    write(tmp_path, 2, _p2p(2, [("recv 2<-1", 64), ("send 2->3", 64)] * 2, pg_config=world4))
    write(tmp_path, 3, _p2p(3, [("recv 3<-2", 64)] * 3, pg_config=world4))
    report = judge(tmp_path)
    assert sorted(tuple(d.suspects) for d in report.divergences) == [(1,), (2,), (2,)], report.divergences
    assert report.divergences[0].suspects == [2], report.divergences[0].text
    assert report.divergences[-1].text.startswith("rank 0 sent to rank 1"), report.divergences[-1].text


def test_a_rank_whose_gpu_never_started_the_collective_the_others_started_is_named(tmp_path: Path) -> None:
    """With TORCH_NCCL_ENABLE_TIMING=1 NCCL marks a collective `started` when its kernel begins: ranks
    0, 1 and 3 started #21, rank 2 never did (its stream was still on earlier work). Without a start
    anywhere (no timing), or with one rank done (each dump is taken at its own moment), nothing is said."""
    world4 = config(("0", "default_pg", [0, 1, 2, 3]))

    def dumps(states: dict[int, str]) -> None:
        for rank, state in states.items():
            entries = [entry(20, record=20), entry(21, state=state, record=21)]
            write(tmp_path, rank, document(entries, {"0": status(21, 20)}, world4))

    dumps({0: "started", 1: "started", 2: "scheduled", 3: "started"})
    report = judge(tmp_path)
    assert [(d.kind, d.seq, d.suspects) for d in report.divergences] == [(NOT_STARTED, 21, [2])]
    assert report.divergences[0].text.startswith(
        "rank 2 never started all_reduce #21 from train_step (train.py:40) in the default group on the GPU, "
        "which ranks 0-1,3 started (waiting for it)"
    ), report.divergences[0].text
    assert report.desync
    dumps({0: "scheduled", 1: "scheduled", 2: "scheduled", 3: "scheduled"})
    assert not judge(tmp_path).desync
    dumps({0: "completed", 1: "started", 2: "scheduled", 3: "started"})
    assert not judge(tmp_path).desync


def test_groups_of_split_group_that_share_a_name_are_judged_apart(tmp_path: Path) -> None:
    # split_group gives ranks 0-1 and ranks 2-3 one group each, both named "1". Rank 3 never issued its
    # group's #2: that must not vanish behind ranks 0-1's group of the same name.
    world = [0, 1, 2, 3]
    for rank in world:
        members = [0, 1] if rank < 2 else [2, 3]
        groups = config(("0", "default_pg", world), ("1", "tp", members))
        seqs = [1] if rank == 3 else [1, 2]
        entries = [entry(s, pg=("1", "tp"), pg_id=1, record=s) for s in seqs]
        write(tmp_path, rank, document(entries, {"1": status(seqs[-1], seqs[-1])}, groups))
    report = judge(tmp_path)
    assert [(g.pg, g.members) for g in report.groups] == [("1", "0-1"), ("1", "2-3")]
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 2, [3])
    assert "in group 1 (tp) of ranks 2-3" in first.text


def test_a_dump_cut_short_by_a_rank_that_died_while_writing_it_says_so(tmp_path: Path) -> None:
    whole = pickle.dumps(document([entry(s) for s in range(1, 40)], {"0": status(39, 39)}, WORLD2))
    write(tmp_path, 0, document([entry(s) for s in range(1, 40)], {"0": status(39, 39)}, WORLD2))
    (tmp_path / "nccl_trace_rank_1").write_bytes(whole[: len(whole) // 2])
    report = judge(tmp_path)
    # Cut right after a "." inside the data (the end a whole pickle has): the unpickler's word tells.
    dot = whole.index(b"train.py") + len(b"train.")
    (tmp_path / "nccl_trace_rank_2").write_bytes(whole[:dot])
    assert [r.reason for r in judge(tmp_path).refused][1].endswith("the rank may have died while writing it")
    (tmp_path / "nccl_trace_rank_2").unlink()
    assert [r.rank for r in report.refused] == [1]
    assert report.headline.startswith(
        "rank 1's dump was refused (nccl_trace_rank_1: cut short (truncated): the rank may have died while "
        "writing it): look at it first"
    )
    assert not any(d.kind not in (NO_DUMP,) for d in report.divergences)


class _Runs:
    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("touch /tmp/rankscope-fr-real-pwned",))


def test_a_cut_pickle_that_names_a_function_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = Path("/tmp/rankscope-fr-real-pwned")
    marker.unlink(missing_ok=True)
    write(tmp_path, 0, document([entry(1)], {"0": status(1, 1)}, WORLD2))
    dump = {"version": "2.10", "entries": [{"x": _Runs()}, *[entry(s) for s in range(50)]]}
    # Protocol 2 has no frames: the function is reached before the cut, and refused for what it is.
    # Protocol 5 frames the whole dump: the cut is found first, and nothing of it is read.
    for protocol, reason in ((2, "refused posix.system"), (5, "cut short (truncated)")):
        whole = pickle.dumps(dump, protocol=protocol)
        (tmp_path / "nccl_trace_rank_1").write_bytes(whole[: len(whole) - 40])
        report = judge(tmp_path)
        assert [r.rank for r in report.refused] == [1]
        assert reason in report.refused[0].reason.replace("refused os.system", "refused posix.system")
        assert not marker.exists()


def test_the_first_recorder_dumps_a_bare_list_of_entries(tmp_path: Path) -> None:
    # torch 2.2's _dump_nccl_trace(): a pickled list, no version, no record_id; "sizes" is the first
    # tensor's shape. Rank 1 never issued the third all_reduce.
    def first(seq: int, size: int = 16) -> dict[str, Any]:
        return {"pg_id": 0, "seq_id": seq, "profiling_name": "nccl:all_reduce", "sizes": [size],
                "state": "scheduled", "retired": False, "frames": FRAMES}  # fmt: skip

    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps([first(1), first(2), first(3)]))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps([first(1), first(2)]))
    report = judge(tmp_path)
    assert report.rank_list == [0, 1] and not report.refused
    first_divergence = report.divergences[0]
    assert (first_divergence.kind, first_divergence.seq, first_divergence.suspects) == (MISSING, 3, [1])
    assert report.groups[0].progress[0].op == "all_reduce"
    assert read_dumps(tmp_path).dumps[0].entries[0].sizes == ((16,),)
    # A list of anything else is still not a dump.
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps([1, 2, 3]))
    assert [r.rank for r in judge(tmp_path).refused] == [1]


def test_an_empty_file_named_like_the_dumps_is_a_rank_that_died_before_writing(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(
            tmp_path, rank, document([entry(1)], {"0": status(1, 1)}, config(("0", "default_pg", [0, 1, 2])))
        )
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"")
    (tmp_path / "events_7").write_bytes(b"")  # not named like the dumps: not a rank of the job
    report = judge(tmp_path)
    assert [(r.rank, r.reason) for r in report.refused] == [
        (2, "nccl_trace_rank_2: empty file: the rank may have died before writing it")
    ]
    assert report.absent == [2] and report.rank_list == [0, 1]
    # The prefix reads it alike.
    prefix = read_dumps(tmp_path / "nccl_trace_rank_")
    assert list(prefix.refused) == [2]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (bytes(4096), "only NUL bytes: the dump's data was never written"),
        (bytes(range(7, 200)), "neither a pickle nor JSON (it starts with 07 08 09 0a 0b 0c 0d 0e)"),
    ],
)
def test_a_zeroed_or_garbled_file_named_like_the_dumps_is_named_with_why(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """What a rank killed while writing (or its node's crash) can leave: never taken for a rank that
    wrote nothing, never silently skipped."""
    for rank in (0, 1):
        write(
            tmp_path, rank, document([entry(1)], {"0": status(1, 1)}, config(("0", "default_pg", [0, 1, 2])))
        )
    (tmp_path / "nccl_trace_rank_2").write_bytes(content)
    (tmp_path / "notes_7").write_bytes(content)  # not named like the dumps: not a rank of the job
    report = judge(tmp_path)
    assert [r.rank for r in report.refused] == [2]
    assert report.refused[0].reason.startswith(f"nccl_trace_rank_2: {reason}"), report.refused[0].reason
    out = run_cli("fr", str(tmp_path)).stdout
    assert f"rank 2's dump was refused (nccl_trace_rank_2: {reason}" in out, out


def test_sends_and_receives_are_not_paired_by_count_once_a_ring_buffer_wrapped(tmp_path: Path) -> None:
    # A pipeline whose ring buffers wrapped: rank 1 still holds one receive more than rank 0 holds
    # sends (rank 0's buffer dropped it). Counting from the first kept one would pair every send with
    # the receive before its own and call the last receive unanswered.
    def ops(name: str, first: int, count: int) -> list[dict[str, Any]]:
        return [entry(0, op=name, p2p_seq=first + i, record=first + i) for i in range(count)]

    write(tmp_path, 0, document(ops("send 0->1", 101, 10), {}, WORLD2))
    write(tmp_path, 1, document(ops("recv 1<-0", 100, 11), {}, WORLD2))
    report = judge(tmp_path)
    assert not report.desync, report.headline
    assert (
        "sends and receives between ranks 0 and 1 not paired: rank 0's and rank 1's ring buffers wrapped"
        in ("\n".join(report.notes))
    )
    # Dumps that start at their first record are paired as before.
    write(tmp_path, 0, document(ops("send 0->1", 0, 10), {}, WORLD2))
    write(tmp_path, 1, document(ops("recv 1<-0", 0, 11), {}, WORLD2))
    assert [d.kind for d in judge(tmp_path).divergences] == [P2P]


def test_a_recorder_that_is_off_and_one_that_recorded_nothing_yet_are_told_apart(tmp_path: Path) -> None:
    # Measured on torch 2.13 (gloo, one rank): with TORCH_FR_BUFFER_SIZE=0 the JSON dump has no
    # "entries" key and empty pg_config/pg_status; with the recorder on and no collective issued yet,
    # pg_config already names the group and entries are empty.
    off = {"comm_lib_version": "", "nccl_comm_state": {}, "pg_config": {}, "pg_status": {}, "version": "2.10"}
    for rank in (0, 1):
        write(tmp_path, rank, off, as_json=True)
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "it was not enabled" in result.stdout and "TORCH_FR_BUFFER_SIZE=2000" in result.stderr
    on = {**document([], {}, {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}), "comm_lib_version": ""}
    for rank in (0, 1):
        write(tmp_path, rank, on, as_json=True)
    report = judge(tmp_path)
    assert report.empty and report.recorder_on
    assert report.headline == (
        "the flight recorder is on but recorded no collective on ranks 0-1: none was issued before the dumps "
        "were taken (pg_config names their process groups)"
    )
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 3 and "TORCH_FR_BUFFER_SIZE" not in result.stdout + result.stderr


def test_frames_without_a_line_name_the_function_and_file_only(tmp_path: Path) -> None:
    no_line = [{k: v for k, v in f.items() if k != "line"} for f in FRAMES]
    for rank in (0, 1):
        entries = [{**entry(s, record=s - 1), "frames": no_line} for s in (1, 2)]
        write(tmp_path, rank, document(entries if rank == 0 else entries[:1], {"0": status(2 - rank, 2 - rank)},
                                       WORLD2))  # fmt: skip
    first = judge(tmp_path).divergences[0]
    assert first.text.startswith(
        "rank 1 never issued all_reduce #2 from train_step (train.py) in the default group"
    )


def test_an_nccl_entry_retired_without_completing_timed_out_and_is_not_taken_for_done(tmp_path: Path) -> None:
    # NCCL's watchdog retires a collective that timed out; its end event never fired, so its state is
    # not "completed" (torch: "a retired but not completed event has timed out"). gloo, which has no
    # events, marks every finished entry retired and leaves state "scheduled".
    timed_out = {**entry(4, state="started", record=3), "retired": True}
    write(tmp_path, 0, document([*(entry(s, record=s - 1) for s in (1, 2, 3)), timed_out], {"0": status(4, 3)},
                                WORLD2))  # fmt: skip
    write(tmp_path, 1, document([entry(s, record=s - 1) for s in (1, 2, 3)], {"0": status(3, 3)}, WORLD2))
    report = judge(tmp_path)
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 4, [1])
    assert "which rank 0 issued (waiting)" in first.text
    assert {p.rank: p.last_completed for p in report.groups[0].progress} == {0: 3, 1: 3}
    rank_0 = read_dumps(tmp_path / "nccl_trace_rank_0")
    recent = analyse(rank_0.dumps).recent
    assert recent[-1].state == "timed out (retired, never completed)"


def test_pickles_dumped_without_stack_traces_are_not_called_json(tmp_path: Path) -> None:
    # _dump_fr_trace(includeStackTraces=False): a pickle whose entries have no "frames" key.
    for rank in (0, 1):
        entries = [entry(1, record=0, frames=False), entry(2, op="all_reduce" if rank == 0 else "barrier",
                                                           record=1, frames=False)]  # fmt: skip
        write(tmp_path, rank, document(entries, {"0": status(2, 1)}, WORLD2))
    first = judge(tmp_path).divergences[0]
    assert first.no_call_sites
    assert "the call sites are missing (the dumps were taken without stack traces" in first.text
    assert "JSON" not in first.text


def test_a_default_group_without_its_description_is_still_the_default_group(tmp_path: Path) -> None:
    # A group without a description is "undefined" to torch; dumps whose default group "0" says so
    # (or nothing) are worded as the default group, as those saying "default_pg".
    for rank in (0, 1):
        entries = [entry(s, pg=("0", "undefined"), record=s - 1) for s in ((1, 2) if rank == 0 else (1,))]
        write(tmp_path, rank, document(entries, {}, config(("0", "undefined", [0, 1]))))
    report = judge(tmp_path)
    assert report.headline.startswith(
        "rank 1 never issued all_reduce #2 from train_step (train.py:40) in the default group,"
    )
    assert [g.desc for g in report.groups] == ["default_pg"]


def _v1(rank: int, ops: list[str]) -> dict[str, Any]:
    """A version 1.4 dump whose ``seq_id`` numbers collectives and send/recv together (torch of that time
    bumped one counter for both), ops in order from 1."""
    entries = [{"record_id": i, "pg_id": 0, "seq_id": i + 1, "op_id": i + 1, "profiling_name": f"nccl:{op}",
                "time_created_ns": i, "input_sizes": [[8]], "output_sizes": [[8]], "state": "completed",
                "retired": True, "frames": FRAMES} for i, op in enumerate(ops)]  # fmt: skip
    return {"version": "1.4", "pg_config": {0: [0, 1, 2]}, "entries": entries}


def test_version_1_collectives_are_numbered_without_the_sends_and_receives_between_them(
    tmp_path: Path,
) -> None:
    # A 3-stage pipeline: the middle stage receives and sends, the others do one of them; the same two
    # all_reduces everywhere carry other seq_ids on the middle rank.
    write(tmp_path, 0, _v1(0, ["all_reduce", "send 0->1", "all_reduce"]))
    write(tmp_path, 1, _v1(1, ["all_reduce", "recv 1<-0", "send 1->2", "all_reduce"]))
    write(tmp_path, 2, _v1(2, ["all_reduce", "recv 2<-1", "all_reduce"]))
    report = judge(tmp_path)
    assert not report.desync, report.headline
    # Rank 2 skipping the second all_reduce is still found, under the collectives' own numbers.
    write(tmp_path, 2, _v1(2, ["all_reduce", "recv 2<-1"]))
    first = judge(tmp_path).divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 2, [2])


def test_a_version_1_dump_that_lost_its_start_is_not_renumbered_and_says_so(tmp_path: Path) -> None:
    wrapped_dump = _v1(1, ["all_reduce", "recv 1<-0", "send 1->2", "all_reduce"])
    wrapped_dump["entries"] = wrapped_dump["entries"][1:]  # its first record fell off the ring buffer
    write(tmp_path, 0, _v1(0, ["all_reduce", "send 0->1", "all_reduce"]))
    write(tmp_path, 1, wrapped_dump)
    write(tmp_path, 2, _v1(2, ["all_reduce", "recv 2<-1", "all_reduce"]))
    report = judge(tmp_path)
    assert (
        "rank 1's dump (version 1.4) numbers its send/recv and collectives together and lost its first records: "
        "its collectives' numbers may be off by the send/recv it no longer holds"
    ) in report.notes

"""The alignment and its words, on dumps recorded from real gloo jobs (torch 2.13, tests/fr/fr_job.py)
and on the NCCL recording; the reader's refusals (a pickle naming a class, garbage, no records)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from rankscope.errors import BadInputError, NothingFoundError
from rankscope.fr.align import analyse
from rankscope.fr.collect import read_dumps
from rankscope.fr.join import group_note, verdict_lines
from rankscope.fr.ras import parse_ras, ras_notes
from rankscope.fr.records import dump_from_raw
from rankscope.fr.report import EXTRA, MISSING, OP, P2P, SIZE, FrReport, load_report, report_document
from rankscope.model import Member

DATA = Path(__file__).parent.parent / "data"
GLOO = DATA / "fr" / "gloo-torch2.13"


def verdict(scenario: str) -> FrReport:
    collected = read_dumps(GLOO / scenario)
    return analyse(collected.dumps, collected.unreadable)


def test_an_extra_all_reduce_is_named_with_its_call_site_though_gloo_paired_it() -> None:
    # Rank 0's extra all_reduce #3 paired with the others' #3 (same op and size: silently wrong sums);
    # the hang comes one collective later. The call sites tell, and the next entry says "extra".
    report = verdict("extra")
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (EXTRA, 3, [0])
    assert report.headline.startswith(
        "rank 0 issued an extra all_reduce #3 from log_global_loss (fr_job.py:41) in the default group; "
        "ranks 1-2 issued all_reduce #3 from step (fr_job.py:45)"
    )
    assert report.desync and not report.absent
    assert report_document(report)["divergences"][0]["sides"][0]["ranks"] == "1-2"


def test_a_skipped_collective_names_the_rank_that_never_issued_it() -> None:
    report = verdict("skip")
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 3, [1])
    assert first.text == (
        "rank 1 never issued all_reduce #3 from step (fr_job.py:45) in the default group, which ranks 0,2 "
        "issued (waiting); rank 1 last issued #2"
    )


def test_all_reduce_against_barrier() -> None:
    report = verdict("op")
    first = report.divergences[0]
    assert (first.kind, first.seq) == (OP, 4)
    assert first.text == (
        "collective #4 of the default group: different collectives: rank 0 issued all_reduce #4 from step "
        "(fr_job.py:47); rank 1 issued barrier #4 from main (fr_job.py:68)"
    )


def test_a_size_mismatch_whose_rank_gloo_aborted_names_the_dead_rank_first() -> None:
    report = verdict("size")
    assert report.absent == [0] and report.rank_list == [1, 2]
    assert report.headline.startswith("rank 0 left no flight-recorder dump: look at it first")
    first = report.divergences[0]
    assert (first.kind, first.seq) == (SIZE, 3)
    assert "rank 1 issued all_reduce #3 from main (fr_job.py:69) with [8] Float" in first.text
    assert "rank 2 issued all_reduce #3 from main (fr_job.py:69) with [4] Float" in first.text


def test_a_subgroup_from_new_group_is_aligned_apart_and_comes_first() -> None:
    report = verdict("subgroup")
    assert [(g.pg, g.members) for g in report.groups] == [("0", "0-2"), ("1", "0-1")]
    first, second = report.divergences
    assert (first.pg, first.kind, first.seq, first.suspects) == ("1", MISSING, 2, [1])
    assert "rank 1 waits in barrier #3 from main (fr_job.py:79) of the default group" in first.text
    # The default group's divergence is the consequence: rank 0 waits in group 1.
    assert (second.pg, second.suspects) == ("0", [0])
    assert "rank 0 waits in all_reduce #2 from main (fr_job.py:78) of group 1" in second.text


def test_gloo_send_recv_leave_only_gaps_and_the_rank_that_never_arrived() -> None:
    # torch 2.13 records no gloo send/recv: rank 0's send is a gap in op_id, rank 1 (blocked in its
    # second recv) never reaches the barrier rank 0 waits in.
    report = verdict("p2p")
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (MISSING, 4, [1])
    assert report.notes == [
        "rank 0 issued 1 operation the recorder did not keep (gaps in op_id: gloo records no send/recv in torch 2.13)"
    ]


def _nccl_p2p(rank: int, ops: list[tuple[str, int, int, list[int]]]) -> dict:
    entries = [
        {
            "record_id": i,
            "process_group": ("0", "default_pg"),
            "collective_seq_id": 0,
            "p2p_seq_id": i + 1,
            "op_id": i + 1,
            "profiling_name": f"nccl:{op} {src}->{dst}",
            "input_sizes": [size],
            "input_dtypes": ["Float"],
            "is_p2p": True,
            "frames": [{"name": "exchange", "filename": "/job/pp.py", "line": 10 + i}],
        }
        for i, (op, src, dst, size) in enumerate(ops)
    ]
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "entries": entries,
    }


def test_nccl_style_p2p_pairs_every_send_with_a_receive() -> None:
    dumps = [
        dump_from_raw(_nccl_p2p(0, [("send", 0, 1, [4]), ("send", 0, 1, [4])]), 0, "r0"),
        dump_from_raw(_nccl_p2p(1, [("recv", 0, 1, [4])]), 1, "r1"),
    ]
    report = analyse(dumps)
    assert [(d.kind, d.suspects) for d in report.divergences] == [(P2P, [1])]
    assert report.divergences[0].text == (
        "rank 0 sent to rank 1 (send #2 from exchange (pp.py:11)), which never posted the receive"
    )
    sizes = analyse(
        [
            dump_from_raw(_nccl_p2p(0, [("send", 0, 1, [4])]), 0, "r0"),
            dump_from_raw(_nccl_p2p(1, [("recv", 0, 1, [8])]), 1, "r1"),
        ]
    )
    assert (
        "rank 0 sent [4] Float" in sizes.divergences[0].text
        and "rank 1 receives [8] Float" in sizes.divergences[0].text
    )


def test_json_dumps_give_the_same_verdict_without_call_sites(tmp_path: Path) -> None:
    for name in os.listdir(GLOO / "extra"):
        if name.endswith(".json"):
            (tmp_path / name).write_bytes((GLOO / "extra" / name).read_bytes())
    collected = read_dumps(tmp_path)
    assert all(d.path.endswith(".json") for d in collected.dumps)
    report = analyse(collected.dumps)
    # Without frames the paired extra all_reduce is invisible; the hang one collective later is not.
    first = report.divergences[0]
    assert (first.kind, first.seq, first.suspects) == (OP, 4, [0])


def test_a_prefix_reads_its_files_and_the_pickle_wins_over_json() -> None:
    collected = read_dumps(GLOO / "op" / "rank_")
    assert [(d.rank, Path(d.path).name) for d in collected.dumps] == [(0, "rank_0"), (1, "rank_1")]


def test_the_nccl_recording_with_frames() -> None:
    dump = read_dumps(DATA / "gpu-h100" / "fr_nccl_1rank.pkl").dumps[0]
    assert dump.rank == 0 and dump.version == "2.10" and dump.comm_lib_version == "2.28.9"
    ops = [(e.backend, e.op, e.seq) for e in dump.entries]
    assert ops[0] == ("nccl", "all_reduce", 1) and ops[-1] == ("nccl", "all_reduce_barrier", 7)
    site = dump.entries[1].call_site()
    assert site is not None and (site.function, site.line) == ("log_global_loss", 6)
    assert dump.group_ranks == {"0": [0]}


class Boom:
    def __reduce__(self) -> tuple:
        return (os.system, ("touch /tmp/rankscope-fr-pwned",))


def test_a_pickle_naming_a_function_is_refused_not_run(tmp_path: Path) -> None:
    marker = Path("/tmp/rankscope-fr-pwned")
    marker.unlink(missing_ok=True)
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": [], "x": Boom()}))
    with pytest.raises(BadInputError, match="refused posix.system|refused os.system"):
        read_dumps(tmp_path)
    assert not marker.exists()


def test_garbage_and_nothing(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(b"\x80\x04garbage")
    with pytest.raises(BadInputError):
        read_dumps(tmp_path)
    with pytest.raises(NothingFoundError):
        read_dumps(tmp_path / "nothing_")
    (tmp_path / "rank_0").write_text(json.dumps({"version": "2.10", "entries": []}))
    (tmp_path / "rank_1").write_text(json.dumps({"version": "2.10", "entries": []}))
    report = analyse(read_dumps(tmp_path).dumps)
    assert report.empty and "TORCH_FR_BUFFER_SIZE=2000" in report.headline


def test_a_wrapped_ring_buffer_is_compared_where_every_rank_still_has_records() -> None:
    def dump(rank: int, seqs: range, op_at: dict[int, str]) -> dict:
        return {
            "entries": [
                {
                    "process_group": ["0", "default_pg"],
                    "collective_seq_id": s,
                    "profiling_name": f"gloo:{op_at.get(s, 'all_reduce')}",
                    "retired": True,
                }
                for s in seqs
            ]
        }

    dumps = [
        dump_from_raw(dump(0, range(10, 20), {}), 0, "a"),
        dump_from_raw(dump(1, range(15, 20), {19: "barrier"}), 1, "b"),
    ]
    report = analyse(dumps)
    assert [(d.kind, d.seq) for d in report.divergences] == [(OP, 19)]


def test_the_document_reads_back_and_the_join_words() -> None:
    report = verdict("subgroup")
    again = load_report(json.loads(json.dumps(report_document(report))))
    assert (
        again.headline == report.headline
        and again.divergences[0].sides[0].call_site == report.divergences[0].sides[0].call_site
    )
    assert verdict_lines(report)[1] == "  " + report.headline
    note = group_note(report)
    assert note([Member("h", 10, 1), Member("h", 11, 2)]) == (
        "fr: enqueued #3 barrier from main (fr_job.py:79), completed #2; fr in group 1: enqueued #1 all_reduce "
        "from main (fr_job.py:76), completed #1"
    )
    assert "no flight-recorder dump from rank 0" in group_note(verdict("size"))([Member("h", 1, 0)])


def test_ncclras_recording() -> None:
    ras = parse_ras((DATA / "gpu-h100" / "ncclras_1rank.txt").read_text())
    assert (ras.nccl_version, ras.nodes, ras.processes, ras.gpus) == ("2.28.9", 1, 1, 1)
    assert [(c.group, c.ranks_per_comm, c.status, c.errors) for c in ras.communicators] == [
        (0, 1, "RUNNING", "OK")
    ]
    assert ras.healthy() and ras.errors == []
    with pytest.raises(ValueError):
        parse_ras("hello\n")


def _calls(rank: int, ops: list[tuple[str, str, int]]) -> dict:
    return {
        "entries": [
            {
                "process_group": ["0", "default_pg"],
                "collective_seq_id": i + 1,
                "profiling_name": f"gloo:{op}",
                "frames": [{"name": function, "filename": "/job/t.py", "line": line}],
            }
            for i, (op, function, line) in enumerate(ops)
        ]
    }


@pytest.mark.parametrize("extra_rank", [0, 1])
def test_two_ranks_the_extra_call_is_the_one_whose_next_call_the_other_issued(extra_rank: int) -> None:
    extra = [("all_reduce", "step", 5), ("all_reduce", "log_global_loss", 9), ("all_reduce", "step", 5)]
    plain = [("all_reduce", "step", 5), ("all_reduce", "step", 5), ("barrier", "main", 20)]
    other = 1 - extra_rank
    report = analyse(
        [
            dump_from_raw(_calls(extra_rank, extra), extra_rank, "a"),
            dump_from_raw(_calls(other, plain), other, "b"),
        ]
    )
    assert report.headline == (
        f"rank {extra_rank} issued an extra all_reduce #2 from log_global_loss (t.py:9) in the default group; "
        f"rank {other} issued all_reduce #2 from step (t.py:5)"
    )


def test_the_in_process_dump_never_raises_on_python_3_9(tmp_path: Path) -> None:
    python39 = Path("/root/.pyenv/versions/3.9.18/bin/python")
    if not python39.exists():
        pytest.skip("no Python 3.9 here")
    src = Path(__file__).parent.parent.parent / "src"
    code = (
        "import sys; from rankscope.inproc.frdump import dump_flight_recorder as d; "
        f"print(d({str(tmp_path / 'rank_0')!r})); sys.modules['torch'] = object(); print(d('/nonexistent/dir/rank_0'))"
    )
    import subprocess

    proc = subprocess.run(
        [str(python39), "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(src)}, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == "torch is not imported in this process: no flight recorder"
    assert second.startswith(
        ("ModuleNotFoundError", "this torch has no flight recorder", "FileNotFoundError")
    )


def test_ras_counts_beside_the_recorder() -> None:
    ras = parse_ras((DATA / "gpu-h100" / "ncclras_1rank.txt").read_text())
    assert ras_notes(ras, 1, 0) == []
    ras.processes = 4
    ras.communicators[0].status, ras.communicators[0].errors = "RUNNING", "MISMATCH"
    assert ras_notes(ras, 2, 2) == [
        "NCCL RAS counts 4 process(es); 2 left a flight-recorder dump (2 known to be missing)",
        "NCCL RAS: communicator group 0 (1 ranks per communicator) is RUNNING with errors MISMATCH",
    ]


def test_an_older_layout_with_seq_id_and_no_process_group() -> None:
    # torch 2.2's NCCL dumps: "seq_id" and "pg_id", no "process_group", no pg_status.
    def old(rank: int, ops: list[str]) -> dict:
        entries = [
            {
                "record_id": i,
                "pg_id": 0,
                "seq_id": i + 1,
                "profiling_name": f"nccl:{op}",
                "input_sizes": [[4]],
                "state": "scheduled",
            }
            for i, op in enumerate(ops)
        ]
        return {
            "version": "1.1",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "entries": entries,
        }

    report = analyse(
        [
            dump_from_raw(old(0, ["all_reduce", "all_reduce"]), 0, "a"),
            dump_from_raw(old(1, ["all_reduce", "broadcast"]), 1, "b"),
        ]
    )
    assert [(d.pg, d.kind, d.seq) for d in report.divergences] == [("0", OP, 2)]

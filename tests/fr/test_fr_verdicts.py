"""The verdict's words where the records say more than pg_status: the entries' own state, one rank's
dump alone, sizes and dtypes of inputs and outputs, coalesced collectives, dumps without frames,
refused dumps. Dumps are written here (NCCL-style where gloo cannot make the case) or recorded
(tests/data)."""

from __future__ import annotations

import json
import os
import pickle
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.cli import run_cli

from rankscope.fr.align import analyse, place
from rankscope.fr.collect import read_dumps
from rankscope.fr.join import LiveWait, group_note, join_p2p_waits, verdict_lines
from rankscope.fr.records import dump_from_raw
from rankscope.fr.report import load_report, report_document
from rankscope.model import Frame, Member
from rankscope.serial import to_json
from rankscope.stacks.fr_live import LiveRecorders, combine, compact, node_peers, p2p_waits, verdict
from rankscope.stacks.report import StackGroup

DATA = Path(__file__).parent.parent / "data"
NCCL_1RANK = DATA / "gpu-h100" / "fr_nccl_1rank.pkl"


def nccl_entry(record: int, seq: int, op: str = "all_reduce", pg: tuple[str, str] = ("0", "default_pg"),
               state: str = "completed", **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "record_id": record,
        "collective_seq_id": seq,
        "op_id": record + 1,
        "profiling_name": f"nccl:{op}",
        "process_group": list(pg),
        "input_sizes": [[4, 4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4, 4]],
        "output_dtypes": ["Float"],
        "state": state,
        "retired": False,
        "time_created_ns": 1000 + record,
        "is_p2p": False,
        **extra,
    }


def write_dumps(directory: Path, per_rank: dict[int, list[dict[str, Any]]], **fields: Any) -> Path:
    for rank, entries in per_rank.items():
        document = {"version": "2.10", "entries": entries, **fields}
        (directory / f"rank_{rank}.json").write_text(json.dumps(document))
    return directory


def test_the_entries_own_state_wins_over_pg_status_and_no_sentinel_is_printed() -> None:
    # The H100 recording: seven entries marked completed, pg_status "last_completed_collective": -1.
    result = run_cli("fr", str(NCCL_1RANK))
    assert "#-1" not in result.stdout, result.stdout
    assert "rank 0: enqueued #7 all_reduce_barrier from fr_nccl.py:10, completed #7" in result.stdout
    document = run_cli("fr", str(NCCL_1RANK), "--json").json()
    assert document["groups"][0]["progress"][0]["last_completed"] == 7


def test_a_group_with_no_collective_yet_says_so_in_words(tmp_path: Path) -> None:
    # pg_status lists group 1 (registered, never used): its numbers are all -1.
    status = {
        "0": {"last_enqueued_collective": 1, "last_started_collective": -1, "last_completed_collective": -1},
        "1": {"last_enqueued_collective": -1, "last_started_collective": -1, "last_completed_collective": -1},
    }
    entries = [nccl_entry(0, 1, state="scheduled")]
    write_dumps(tmp_path, {0: entries, 1: entries}, pg_status=status)
    result = run_cli("fr", str(tmp_path))
    assert "#-1" not in result.stdout, result.stdout
    assert "ranks 0-1: enqueued nothing, completed none" in result.stdout
    assert "ranks 0-1: enqueued #1 all_reduce, completed none" in result.stdout


def test_the_dump_of_a_one_rank_job_shows_what_that_recorder_holds_and_says_it_is_the_whole_job() -> None:
    result = run_cli("fr", str(NCCL_1RANK))
    assert result.returncode == 0, result.stderr
    assert (
        "rank 0 is the whole job (its process groups have no other member): no other rank to wait for; "
        "every collective it issued completed" in result.stdout
    )
    assert "a desync needs every rank's dump" not in result.stdout
    assert "no desync" not in result.stdout
    assert "Rank 0's last 7 operations (oldest first)" in result.stdout
    assert (
        "  #2 all_reduce [65536] Float from log_global_loss (fr_nccl.py:6): completed within 1.38 ms of "
        "being enqueued (the default group)" in result.stdout
    )
    document = run_cli("fr", str(NCCL_1RANK), "--json").json()
    assert document["desync"] is False
    assert [(r["seq"], r["op"], r["state"]) for r in document["recent"]][-1] == (
        7,
        "all_reduce_barrier",
        "completed",
    )


def test_a_one_rank_nccl_job_timed_out_by_its_watchdog_is_held_by_the_rank_itself() -> None:
    """Recorded on an H100: one NCCL rank, an all_reduce queued behind a kernel that never ends; the
    watchdog timed it out after 25 s and torch dumped the recorder (TORCH_FR_DUMP_TEMP_FILE)."""
    result = run_cli("fr", str(DATA / "gpu-h100" / "fr_nccl_timeout_rank_0"))
    assert result.returncode == 0, result.stderr
    assert (
        "rank 0 is the whole job (its process groups have no other member): no other rank to wait for; its #4 "
        "all_reduce from log_global_loss (nccl_timeout.py:9) never completed: what held it is in the rank itself"
    ) in result.stdout
    # NCCL's recorder saw no start: without timing, `scheduled` cannot tell running from waiting
    assert "note: rank 0: the last NCCL collective is `scheduled`, but" in result.stdout
    assert "TORCH_NCCL_ENABLE_TIMING=1 (not on in this job" in result.stdout
    document = run_cli("fr", str(DATA / "gpu-h100" / "fr_nccl_timeout_rank_0"), "--json").json()
    assert document["alone"] is True and document["desync"] is False
    assert document["recent"][-1]["state"] == "scheduled"
    # above live stacks (`stacks --fr`, or a live NCCL rank's own recorder): not titled a desync
    collected = read_dumps(DATA / "gpu-h100" / "fr_nccl_timeout_rank_0")
    assert verdict_lines(analyse(collected.dumps))[0] == "Flight recorder"


def test_one_dump_of_a_larger_world_is_not_the_whole_job(tmp_path: Path) -> None:
    entries = [nccl_entry(0, 1, state="completed"), nccl_entry(0, 2, state="scheduled")]
    write_dumps(tmp_path, {0: entries}, pg_config={"0": {"desc": "default_pg", "ranks": "[0]"}})
    alone = run_cli("fr", str(tmp_path), "--json").json()
    assert alone["alone"] is True
    larger = run_cli("fr", str(tmp_path), "--world-size", "2", "--json").json()
    assert larger["alone"] is False and larger["absent"] == [1]
    assert "only rank 0's dump" in larger["headline"] and "whole job" not in larger["headline"]
    # a timed recorder (duration_ms) shows starts: its `scheduled` means not started, no note
    timed = [nccl_entry(0, 1, state="completed", duration_ms=0.5), nccl_entry(0, 2, state="scheduled")]
    write_dumps(tmp_path, {0: timed}, pg_config={"0": {"desc": "default_pg", "ranks": "[0]"}})
    assert not any(
        "TORCH_NCCL_ENABLE_TIMING" in n for n in run_cli("fr", str(tmp_path), "--json").json()["notes"]
    )


def test_one_dump_of_several_ranks_names_the_others_first_and_times_what_torch_timed(tmp_path: Path) -> None:
    entries = [nccl_entry(0, 1, duration_ms=0.25), nccl_entry(1, 2, state="started")]
    write_dumps(tmp_path, {1: entries}, pg_config={"0": {"desc": "default_pg", "ranks": "[0, 1]"}})
    result = run_cli("fr", str(tmp_path))
    assert result.returncode == 4, result.stdout
    assert result.stdout.count("rank 0 left no flight-recorder dump: look at it first") == 1
    assert "  #1 all_reduce [4x4] Float: completed, took 0.25 ms (the default group)" in result.stdout
    assert "  #2 all_reduce [4x4] Float: started (the default group)" in result.stdout


def verdict_of(directory: Path) -> tuple[int, str, dict[str, Any]]:
    """Exit code, text and `--json` document of `rankscope fr DIRECTORY`."""
    text = run_cli("fr", str(directory))
    document = run_cli("fr", str(directory), "--json").json()
    return text.returncode, text.stdout, document


def test_an_output_size_mismatch_is_a_desync(tmp_path: Path) -> None:
    agreed = nccl_entry(0, 1)
    write_dumps(
        tmp_path, {0: [agreed, nccl_entry(1, 2)], 1: [agreed, nccl_entry(1, 2, output_sizes=[[5, 4]])]}
    )
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert (
        "collective #2 of the default group: different sizes: rank 0 issued all_reduce #2 with [4x4] Float; "
        "rank 1 issued all_reduce #2 with [4x4] Float -> [5x4] Float" in text
    )
    [divergence] = document["divergences"]
    assert divergence["kind"] == "size" and divergence["sides"][1]["out_sizes"] == [[5, 4]]


def test_an_output_dtype_mismatch_is_a_desync(tmp_path: Path) -> None:
    write_dumps(tmp_path, {0: [nccl_entry(0, 1)], 1: [nccl_entry(0, 1, output_dtypes=["Half"])]})
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert "different dtypes: rank 0 issued all_reduce #1 with [4x4] Float; rank 1 issued all_reduce #1 with " \
        "[4x4] Float -> [4x4] Half" in text  # fmt: skip
    assert document["divergences"][0]["kind"] == "dtype"


def coalesced(
    first: int, sizes: list[list[int]], closing: str = "ALLGATHER_coalesced", seq: int = 1
) -> list[dict]:
    """Operations issued under one coalescing manager: one number for all, then the closing entry."""
    ops = [nccl_entry(first + i, seq, op="_broadcast_oop", input_sizes=[s], output_sizes=[s])
           for i, s in enumerate(sizes)]  # fmt: skip
    return ops + [nccl_entry(first + len(sizes), seq, op=closing, input_sizes=[[]], output_sizes=[[]])]


def test_a_size_mismatch_inside_a_coalesced_collective_is_found_entry_by_entry(tmp_path: Path) -> None:
    write_dumps(tmp_path, {0: coalesced(0, [[4, 4], [5, 5]]), 1: coalesced(0, [[4, 4], [4, 4]])})
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert (
        "collective #1 of the default group: different sizes: rank 0 issued _broadcast_oop #1 (operation 2 of 3 "
        "under #1: _broadcast_oop, _broadcast_oop, ALLGATHER_coalesced) with [5x5] Float; rank 1 issued "
        "_broadcast_oop #1 (operation 2 of 3 under #1: _broadcast_oop, _broadcast_oop, ALLGATHER_coalesced) "
        "with [4x4] Float" in text
    )
    assert [s["operations"] for s in document["divergences"][0]["sides"]] == [3, 3]


def test_a_coalesced_collective_of_another_length_differs_in_its_operations(tmp_path: Path) -> None:
    write_dumps(tmp_path, {0: coalesced(0, [[4, 4]]), 1: coalesced(0, [[4, 4], [4, 4]])})
    code, text, _ = verdict_of(tmp_path)
    assert code == 14, text
    assert "collective #1 of the default group: different collectives: " in text
    assert "rank 1 issued _broadcast_oop #1 (operation 2 of 3 under #1" in text


def test_sequence_number_0_counts(tmp_path: Path) -> None:
    # Every entry numbered 0 (what PyTorch's own analyzer tests write): compared like any other.
    write_dumps(tmp_path, {0: [nccl_entry(0, 0)], 1: [nccl_entry(0, 0, op="all_gather")]})
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert "collective #0 of the default group: different collectives: rank 0 issued all_reduce #0; " \
        "rank 1 issued all_gather #0" in text  # fmt: skip
    assert document["divergences"][0]["seq"] == 0


def test_what_exists_on_the_root_only_and_uneven_splits_are_not_desyncs(tmp_path: Path) -> None:
    root = nccl_entry(0, 1, op="gather", output_sizes=[[4, 4], [4, 4]])
    leaf = nccl_entry(0, 1, op="gather", output_sizes=[[]], output_dtypes=[""])
    uneven = [
        nccl_entry(1, 2, op="all_to_all", input_sizes=[[s, 4]], output_sizes=[[6 - s, 4]]) for s in (2, 4)
    ]
    gather_v = [
        nccl_entry(2, 3, op="all_gather_v", input_sizes=[[s, 4]], output_sizes=[[6, 4]]) for s in (2, 4)
    ]
    write_dumps(tmp_path, {0: [root, uneven[0], gather_v[0]], 1: [leaf, uneven[1], gather_v[1]]})
    code, text, document = verdict_of(tmp_path)
    assert code == 0, text
    assert "no desync: ranks 0-1 issued the same collectives (last completed #3)" in text
    assert document["desync"] is False


def test_an_all_to_all_whose_totals_do_not_add_up_is_a_size_desync_of_every_rank(tmp_path: Path) -> None:
    """Uneven splits are legal, but every element a rank sends another receives: 16+16 sent against 16+8
    received means the splits disagree (torch's analyzer: "Input/output mismatch"); no rank is blamed."""
    a2a = [
        nccl_entry(1, 2, op="all_to_all", input_sizes=[[4, 4]], output_sizes=[[n, 4]], state="scheduled")
        for n in (4, 2)
    ]
    write_dumps(tmp_path, {r: [nccl_entry(0, 1), a2a[r]] for r in (0, 1)})
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert "all_to_all #2" in text and "send 32 elements in all and receive 24" in text, text
    assert document["divergences"][0]["kind"] == "size", document["divergences"]
    # before version 2.4 torch recorded no all_to_all sizes worth adding up
    write_dumps(tmp_path, {r: [nccl_entry(0, 1), a2a[r]] for r in (0, 1)}, version="2.3")
    code, text, _ = verdict_of(tmp_path)
    assert code == 0, text


GLOO = DATA / "fr" / "gloo-torch2.13"


def test_without_frames_the_call_sites_are_said_to_be_missing_and_the_first_difference_may_be_a_consequence(
    tmp_path: Path,
) -> None:
    # The real "extra" job: rank 0's extra all_reduce #3 (from another line) pairs with the others' #3;
    # JSON dumps cannot show it, and #4 is only its consequence.
    for rank in range(3):
        (tmp_path / f"rank_{rank}.json").write_bytes((GLOO / "extra" / f"rank_{rank}.json").read_bytes())
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    assert (
        "collective #4 of the default group: different collectives: rank 0 issued all_reduce #4; ranks 1-2 "
        "issued barrier #4 — the call sites are missing (JSON dumps carry no frames): an earlier collective of "
        "the same op and sizes issued from another line cannot be seen, so this may be its consequence, not "
        "the cause" in text
    )
    assert document["divergences"][0]["no_call_sites"] is True
    # The pickles of the same job name the cause, with no such words.
    with_frames = run_cli("fr", str(GLOO / "extra"))
    assert "rank 0 issued an extra all_reduce #3 from log_global_loss" in with_frames.stdout
    assert "call sites are missing" not in with_frames.stdout


class Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch /tmp/rankscope-fr-refused-ran",))


def test_a_refused_dump_is_named_in_the_verdict_and_beside_its_rank_in_stacks(tmp_path: Path) -> None:
    marker = Path("/tmp/rankscope-fr-refused-ran")
    marker.unlink(missing_ok=True)
    (tmp_path / "rank_0.json").write_bytes((GLOO / "op" / "rank_0.json").read_bytes())
    (tmp_path / "rank_1").write_bytes(pickle.dumps({"entries": [], "x": Boom()}))
    code, text, document = verdict_of(tmp_path)
    assert code == 4, text
    assert not marker.exists()
    assert re.search(
        r"Verdict\n  rank 1's dump was refused \(rank_1: refused (posix|os)\.system: a flight-recorder dump holds "
        r"no objects\): look at it first; only rank 0's dump",
        text,
    ), text
    assert "dead, or never dumped" not in text
    assert document["absent"] == [1] and [r["rank"] for r in document["refused"]] == [1]
    # `stacks --fr` beside the stack group holding rank 1.
    collected = read_dumps(tmp_path)
    report = analyse(collected.dumps, collected.unreadable, refused=collected.refused)
    assert group_note(report)([Member("h", 11, 1)]) == "flight-recorder dump of rank 1 refused"
    again = load_report(json.loads(json.dumps(report_document(report))))
    assert again.refused == report.refused


def frames(*user: tuple[str, int]) -> list[dict[str, Any]]:
    """A stack as torch records it, innermost first: torch's own frames, then the user's calls."""
    torch_frames = [
        {"name": "all_reduce", "filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
         "line": 2500},
        {"name": "wrapper", "filename": "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
         "line": 83},
    ]  # fmt: skip
    return torch_frames + [{"name": name, "filename": "/job/train.py", "line": line} for name, line in user]


STEP = frames(("sync_grads", 10), ("step", 40), ("main", 30), ("<module>", 50))
LOG = frames(("sync_grads", 10), ("log_loss", 20), ("main", 31), ("<module>", 50))
HANG = frames(("main", 33), ("<module>", 50))


def test_a_shared_wrapper_does_not_hide_an_extra_call_the_line_where_the_stacks_fork_is_named(
    tmp_path: Path,
) -> None:
    # Both ranks reach all_reduce through sync_grads (train.py:10); rank 0 also from log_loss.
    rank_0 = [nccl_entry(0, 1, frames=STEP), nccl_entry(1, 2, frames=LOG), nccl_entry(2, 3, frames=STEP)]
    rank_1 = [
        nccl_entry(0, 1, frames=STEP),
        nccl_entry(1, 2, frames=STEP),
        nccl_entry(2, 3, op="barrier", frames=HANG),
    ]
    for rank, entries in ((0, rank_0), (1, rank_1)):
        (tmp_path / f"rank_{rank}").write_bytes(
            pickle.dumps({"version": "2.10", "entries": entries}, protocol=4)
        )
    code, text, document = verdict_of(tmp_path)
    assert code == 14, text
    # The stacks part in main: line 31 (log_loss) on rank 0, line 30 (step) on rank 1.
    assert (
        "rank 0 issued an extra all_reduce #2 from sync_grads (train.py:10), reached from main (train.py:31) "
        "in the default group; rank 1 issued all_reduce #2 from sync_grads (train.py:10), reached from main "
        "(train.py:30)" in text
    )
    sides = document["divergences"][0]["sides"]
    assert {s["ranks"]: s["diverges_at"]["line"] for s in sides} == {"0": 31, "1": 30}


def test_a_dump_with_frames_beside_one_without_is_compared_without_call_sites(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(
        pickle.dumps({"version": "2.10", "entries": [nccl_entry(0, 1, frames=STEP)]}, protocol=4)
    )
    write_dumps(tmp_path, {1: [nccl_entry(0, 1)]})
    code, text, _ = verdict_of(tmp_path)
    assert code == 0, text
    assert "no desync: ranks 0-1 issued the same collectives" in text


def test_a_dump_that_names_no_group_says_so_in_words(tmp_path: Path) -> None:
    # Entries without process_group and without pg_id: the group has no name to print.
    def unnamed(record: int, seq: int, op: str = "all_reduce") -> dict[str, Any]:
        entry = nccl_entry(record, seq, op, state="scheduled")
        del entry["process_group"]
        return entry

    directory = write_dumps(
        tmp_path, {0: [unnamed(0, 1), unnamed(1, 2)], 1: [unnamed(0, 1), unnamed(1, 2, "broadcast")]}
    )
    code, text, document = verdict_of(directory)
    assert code == 14
    assert "group " + "(" not in text and "group ," not in text and "group :" not in text
    assert "collective #2 of the group the dumps do not name: different collectives" in text
    assert "  the group the dumps do not name, ranks 0-1" in text
    assert document["divergences"][0]["pg"] == ""
    note = group_note(load_report(document))([Member(host="h", pid=1, rank=0)])
    assert note == "fr in the group the dumps do not name: enqueued #2 all_reduce, none completed", note


def test_across_nodes_the_verdict_names_the_same_diverging_line_as_on_one_node() -> None:
    # Rank 0 on one node, rank 1 on another: each node sends its compact records (JSON, as over ssh),
    # the head combines them. The stacks travel in a table (one copy per distinct stack), so the line
    # where the stacks part is found as when the files are read on one machine.
    rank_0 = [nccl_entry(0, 1, frames=STEP), nccl_entry(1, 2, frames=LOG), nccl_entry(2, 3, frames=STEP)]
    rank_1 = [nccl_entry(0, 1, frames=STEP), nccl_entry(1, 2, frames=STEP), nccl_entry(2, 3, op="barrier", frames=HANG)]  # fmt: skip
    dumps = [dump_from_raw({"version": "2.10", "entries": e}, r, f"rank_{r}") for r, e in ((0, rank_0), (1, rank_1))]  # fmt: skip
    one_node = analyse(dumps)
    sent = [json.loads(json.dumps(to_json(compact(LiveRecorders(dumps=[d], world_size=2))))) for d in dumps]
    assert len(sent[0]["stacks"]) == 2 and sent[0]["stack_of"] == {"0": [0, 1, 0]}  # STEP sent once
    assert not any(e["frames"] for s in sent for d in s["dumps"] for e in d["entries"])
    assert all("site-packages" not in f["filename"] for s in sent for stack in s["stacks"] for f in stack)
    across = verdict(combine(sent))
    assert across.headline == one_node.headline
    assert "reached from main (train.py:31)" in across.headline
    lines = {s.ranks: s.diverges_at.line for s in across.divergences[0].sides if s.diverges_at}
    assert lines == {"0": 31, "1": 30}


def test_a_node_stack_table_that_does_not_fit_its_entries_leaves_the_call_sites_only() -> None:
    dump = dump_from_raw({"version": "2.10", "entries": [nccl_entry(0, 1, frames=STEP)]}, 0, "rank_0")
    sent = to_json(compact(LiveRecorders(dumps=[dump])))
    assert combine([sent]).dumps[0].entries[0].frames[0].line == 10  # the table read back
    for bad in ([], [0, 0], [7], [-5]):  # too few, too many, out of the table
        [entry] = combine([dict(sent, stack_of={"0": bad})]).dumps[0].entries
        assert entry.frames == () and place(entry.call_site()) == "sync_grads (train.py:10)"
    assert combine([dict(sent, stack_of={"0": ["x"]})]).dumps == []  # not JSON of a node: skipped


C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stack_group(ranks: list[int], *frames: Frame) -> StackGroup:
    return StackGroup("MainThread", True, frames, [Member(host="h", pid=100 + r, rank=r) for r in ranks])


def test_a_rank_waiting_in_send_is_joined_into_the_verdict_once_and_a_rank_in_its_own_code_is_not() -> None:
    # The skip scenario (real gloo dumps): rank 1 never issued all_reduce #3. Its live stack waits in send.
    files = read_dumps(DATA / "fr" / "gloo-torch2.13" / "skip")
    report = analyse(files.dumps)
    user = Frame("push", "/job/train.py", 12)
    sending = stack_group([1], Frame("main", "/job/train.py", 3), user, Frame("send", C10D, 2700))
    own_code = stack_group([1], Frame("main", "/job/train.py", 3), Frame("send", "/job/train.py", 9))
    assert p2p_waits([own_code]) == {}  # a function of the user's named send is not torch's
    waits = p2p_waits([sending])
    assert waits == {1: LiveWait("send", user)}
    joined = join_p2p_waits(report, waits)
    first = joined.divergences[0]
    assert first.text.startswith(
        "rank 1 waits in send (point-to-point; gloo records no send/recv) called from push (train.py:12), "
        "peer not known"
    )
    assert first.text.endswith("; so " + report.divergences[0].text)
    assert joined.headline.startswith("rank 1 waits in send") and not report.headline.startswith(
        "rank 1 waits"
    )
    assert [g.divergence for g in joined.groups if g.divergence is not None] == [first]
    assert join_p2p_waits(joined, waits) is joined  # joined once (a saved verdict shown again)
    # A waiting rank no divergence names (rank 0 issued the collective) is said after the headline.
    other = join_p2p_waits(report, {0: waits[1]})
    assert other.divergences == report.divergences
    assert other.headline == report.headline + "; rank 0 waits in send (point-to-point; gloo records no " \
        "send/recv) called from push (train.py:12), peer not known (`rankscope stacks --locals` reads " \
        "src/dst from the stacks)"  # fmt: skip
    assert report_document(other)["p2p_waits"][0]["rank_list"] == [0]
    assert join_p2p_waits(other, waits) is other
    document = report_document(joined)
    assert document["divergences"][0]["p2p_waits"] == [
        {
            "ranks": "1",
            "rank_list": [1],
            "op": "send",
            "call_site": {"function": "push", "filename": "/job/train.py", "line": 12},
        }  # fmt: skip
    ]
    assert "p2p_waits" not in report_document(report)["divergences"][0]  # unchanged without stacks


def test_the_peer_a_node_read_from_its_locals_reaches_the_head() -> None:
    # A node ran with --locals: it read recv's src (rank 0) of its rank 1 and sends it beside its records;
    # the head, which sees merged stacks only, names the peer from there.
    user = Frame("receive_activations", "/job/pp.py", 7)
    receiving = stack_group([1], Frame("main", "/job/pp.py", 3), user, Frame("recv", C10D, 2799))
    on_node = {1: LiveWait("recv", user, 0)}
    dump = dump_from_raw({"version": "2.10", "entries": [nccl_entry(0, 1)]}, 1, "rank_1")
    sent = json.loads(
        json.dumps(to_json(replace(compact(LiveRecorders(dumps=[dump])), p2p_peers=node_peers(on_node))))
    )
    assert sent["p2p_peers"] == {"1": 0}
    peers = combine([sent]).p2p_peers
    assert p2p_waits([receiving], peers=peers) == on_node
    assert p2p_waits([receiving]) == {1: LiveWait("recv", user)}  # without: peer unknown
    assert p2p_waits([receiving], peers={"1": True}) == {1: LiveWait("recv", user)}  # type: ignore[dict-item]
    assert combine([dict(sent, p2p_peers={"1": "zero"})]).dumps == []  # not a node's JSON: skipped


def test_nodes_whose_records_are_all_unreadable_give_no_verdict() -> None:
    # Not "no desync: rank  issued the same collectives": there is nothing to judge.
    assert verdict(combine([{"dumps": "garbage"}, ["not", "an", "object"]])).empty
    assert not verdict(combine([{"missing": {"3": "no in-process handler"}, "world_size": 4}])).empty

"""`rankscope fr` on hostile dumps from tests/fr/hostile.py: shared references, a dump past the byte
cap, a FIFO, a symbolic link. Each gives a bounded run (peak RSS of the command, measured) and says
what it cut or refused; a cut never becomes a desync."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fr import hostile

from rankscope.fr.collect import read_dumps, read_live_dump
from rankscope.fr.records import Cache, Limits

#: Runs `rankscope ARGS...` and prints its exit code, then the peak RSS (KiB) of the largest process
#: waited for: rankscope itself.
PEAK_RSS = """
import json, resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "rankscope", *sys.argv[1:]], capture_output=True, text=True)
print(json.dumps([done.returncode, done.stdout, done.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def run_measured(*args: str) -> tuple[int, str, str, float]:
    """Exit code, stdout, stderr and peak RSS in MiB of `rankscope ARGS`."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *args], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr
    code, out, err, peak = json.loads(result.stdout)
    return int(code), str(out), str(err), int(peak) / 1024


@pytest.mark.timeout(300)
def test_a_pickle_of_shared_references_is_cut_to_the_caps_and_read_once(tmp_path: Path) -> None:
    # 20,000 entries sharing one stack of 20,000 frames (400 million frames if each were walked):
    # the run is bounded by the caps and frames are converted once per shared list.
    size = hostile.shared_reference_pickle(tmp_path / "rank_0")
    hostile.shared_reference_pickle(tmp_path / "rank_1")
    assert size < 1_000_000
    code, out, err, peak = run_measured("fr", str(tmp_path))
    assert code == 0, out + err
    assert "no desync: ranks 0-1 issued the same collectives" in out
    for rank in (0, 1):
        assert (
            f"note: rank {rank}'s dump was cut: kept the last 10000 of 20000 entries; "
            "kept the innermost 64 frames of 10000 entries' stacks (up to 20000 frames)" in out
        )
    # Measured: about 60 MiB. Every frame of every entry converted would be tens of GB.
    assert peak < 300, peak


def test_a_dump_past_the_byte_cap_is_refused_unread_and_the_others_are_analysed(tmp_path: Path) -> None:
    hostile.json_dump(tmp_path / "rank_0.json", [hostile.entry(1), hostile.entry(2)])
    hostile.sparse_json(tmp_path / "rank_1.json")  # 1 GiB
    code, out, err, peak = run_measured("fr", str(tmp_path))
    assert code == 4, out + err
    assert "Unreadable (1)" in out
    assert f"{tmp_path / 'rank_1.json'}: 1073741824 bytes, over the 16 MiB cap: not read" in out
    # Measured: about 40 MiB; reading the file whole took over 1 GiB.
    assert peak < 200, peak


def test_the_byte_cap_can_be_lowered_and_raised(tmp_path: Path) -> None:
    entries = [hostile.entry(i) for i in range(1, 8001)]  # about 1.6 MB as JSON
    hostile.json_dump(tmp_path / "rank_0.json", entries)
    hostile.json_dump(tmp_path / "rank_1.json", entries)
    small = run_measured("fr", str(tmp_path), "--max-mib", "1")
    assert small[0] == 8 and "over the 1 MiB cap: not read" in small[2], small
    whole = run_measured("fr", str(tmp_path))
    assert whole[0] == 0 and "no desync" in whole[1], whole


def test_a_fifo_and_a_symbolic_link_are_named_and_never_opened_for_reading(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    hostile.json_dump(real, [hostile.entry(1)])
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    hostile.json_dump(dumps / "rank_0.json", [hostile.entry(1)])
    hostile.fifo(dumps / "rank_1")
    os.symlink(real, dumps / "rank_2.json")
    # The FIFO has no writer: a blocking open would hang here (pytest-timeout ends the test).
    code, out, err, _ = run_measured("fr", str(dumps))
    assert code == 4, out + err
    assert f"{dumps / 'rank_1'}: not a regular file (a FIFO): not read" in out
    assert f"{dumps / 'rank_2.json'}: a symbolic link: not followed" in out
    assert "Unreadable (2)" in out
    # Named directly, the same refusals, as one error line.
    fifo = run_measured("fr", str(dumps / "rank_1"))
    assert fifo[0] == 8 and "not a regular file (a FIFO): not read" in fifo[2]
    link = run_measured("fr", str(dumps / "rank_2.json"))
    assert link[0] == 8 and "a symbolic link: not followed" in link[2]


def _cut_dumps(directory: Path) -> None:
    # Rank 0 issued 3 collectives of group 1 first, then 10 of the default group; rank 1 interleaved
    # them. With 8 entries kept, rank 0 keeps none of group 1 while rank 1 keeps all three.
    group_1 = [hostile.entry(s, pg="1", desc="undefined") for s in (1, 2, 3)]
    default = [hostile.entry(s) for s in range(1, 11)]
    config = {"0": {"desc": "default_pg", "ranks": "[0, 1]"}, "1": {"desc": "undefined", "ranks": "[0, 1]"}}
    for rank, entries in ((0, group_1 + default), (1, default[:5] + group_1 + default[5:])):
        text = json.dumps({"version": "2.10", "pg_config": config, "entries": entries})
        (directory / f"rank_{rank}.json").write_text(text)


def test_a_cut_is_said_and_never_becomes_a_desync(tmp_path: Path) -> None:
    _cut_dumps(tmp_path)
    collected = read_dumps(tmp_path, Limits(max_entries=8))
    assert [len(d.entries) for d in collected.dumps] == [8, 8]
    code, out, err, _ = run_measured("fr", str(tmp_path), "--max-entries", "8")
    assert code == 0, out + err
    assert "no desync" in out
    assert "note: rank 0's dump was cut: kept the last 8 of 13 entries" in out
    assert "note: rank 1's dump was cut: kept the last 8 of 13 entries" in out
    assert "rank 0's kept entries hold none of group 1: not compared there" in out
    # Uncut, the same dumps agree too.
    whole = run_measured("fr", str(tmp_path))
    assert whole[0] == 0 and "was cut" not in whole[1]


def test_a_live_dump_is_read_with_the_same_cap_and_checks(tmp_path: Path) -> None:
    # What `rankscope stacks` reads from a rank's runtime directory (rankscope.stacks.fr_live).
    uid = os.getuid()
    big = tmp_path / "1.fr"
    hostile.sparse_json(big, (16 << 20) + 1)
    with pytest.raises(ValueError, match=r"16777217 bytes, over the 16 MiB cap: not read"):
        read_live_dump(str(big), uid, 0, Cache())
    pipe = tmp_path / "2.fr"
    hostile.fifo(pipe)  # no writer: a blocking open would hang (pytest-timeout ends the test)
    with pytest.raises(ValueError, match=r"not a regular file \(a FIFO\): not read"):
        read_live_dump(str(pipe), uid, 0, Cache())
    good = tmp_path / "3.fr"
    hostile.json_dump(good, [hostile.entry(1)])
    with pytest.raises(ValueError, match="not the process's own file"):
        read_live_dump(str(good), uid + 1, 0, Cache())
    assert [e.seq for e in read_live_dump(str(good), uid, 0, Cache()).entries] == [1]


def test_far_apart_sequence_numbers_and_odd_values_give_a_verdict(tmp_path: Path) -> None:
    # Numbers 1 and 10**15 on each rank (a loop over every number between them would never end);
    # infinite and NaN numbers, nested garbage where strings and sizes belong.
    odd = {"collective_seq_id": float("inf"), "record_id": float("nan"), "profiling_name": [["x"]],
           "process_group": [[["deep"]], {"a": 1}], "input_sizes": [[[[1]]]], "frames": [{"name": ["f"], "line": "x"}]}  # fmt: skip
    for rank in (0, 1):
        entries = [hostile.entry(1), hostile.entry(10**15, op="barrier" if rank else "all_reduce"), odd]
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps({"entries": entries}, protocol=4))
    code, out, err, _ = run_measured("fr", str(tmp_path))
    assert code == 14, out + err
    assert "collective #1000000000000000 of the default group: different collectives" in out


@pytest.mark.timeout(300)
def test_groups_sharing_one_huge_member_list_are_cut(tmp_path: Path) -> None:
    # 1000 groups whose pg_config names the same list of 300,000 ranks (one list in the pickle), each
    # listed in pg_status: 300 million members if each group kept its own.
    members = list(range(300_000))
    config = {str(g): {"desc": f"g{g}", "ranks": members} for g in range(1, 1001)}
    status = {str(g): {"last_enqueued_collective": 0} for g in range(1, 1001)}
    raw = {"entries": [hostile.entry(1)], "pg_config": config, "pg_status": status}
    for rank in (0, 1):
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps(raw, protocol=4))
    code, out, err, peak = run_measured("fr", str(tmp_path))
    assert code == 4, err  # ranks 2..299,999 of the groups left no dump
    assert "note: rank 0's dump was cut: kept the members of the groups up to 1048576 ranks in all" in out
    assert "ranks 2-299999 left no flight-recorder dump" in out
    # Measured: about 100 MiB, three groups of 300,000 members judged (every group kept: hours).
    assert peak < 500, peak


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_named_like_a_dump_is_named_from_its_type_never_opened(tmp_path: Path) -> None:
    hostile.json_dump(tmp_path / "rank_0.json", [hostile.entry(1)])
    os.mknod(tmp_path / "rank_1", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    code, out, err, _ = run_measured("fr", str(tmp_path))
    assert code == 4, out + err
    assert f"{tmp_path / 'rank_1'}: not a regular file (a character device): not read" in out

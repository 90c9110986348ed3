"""How the watcher finds a rank's progress marker (rankscope.watch.collect.Watched.find_marker): under the
name the rank would give it, at every look; by listing the shared runtime directory, at most every
LIST_EVERY seconds."""

from __future__ import annotations

from pathlib import Path

from rankscope.inproc import runtime
from rankscope.watch import collect


def test_a_marker_is_found_under_its_name_at_once_and_by_listing_rarely(tmp_path: Path) -> None:
    for index in range(50):  # other processes' files in the shared directory
        (tmp_path / runtime.file_name("node1", 5000 + index, "progress", index)).touch()
    worker = collect.Watched(4242, 3, "node1", None, str(tmp_path), 0)
    assert worker.find_marker() is None
    named = tmp_path / runtime.file_name("node1", 4242, "progress", 3)
    named.touch()
    assert worker.find_marker() == str(named)  # its own name, looked at every time
    # A marker under another rank than the one its environment gave the watcher: found by a listing,
    # and the listing is not repeated before LIST_EVERY seconds have passed.
    other = collect.Watched(4343, 1, "node1", None, str(tmp_path), 0)
    assert other.find_marker() is None
    odd = tmp_path / runtime.file_name("node1", 4343, "progress", 7)
    odd.touch()
    assert other.find_marker() is None
    other.listed_at -= collect.LIST_EVERY
    assert other.find_marker() == str(odd)
    (tmp_path / runtime.file_name("node1", 4444, "progress", 2)).touch()  # a process of another host
    assert collect.Watched(4444, 2, "node2", None, str(tmp_path), 0).find_marker() is None

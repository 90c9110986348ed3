"""The flight recorders of live ranks, in the same `rankscope stacks` pass as their stacks.

Every target whose in-process handler (``RANKSCOPE_INPROC=1``) answers ``fr`` requests is asked at
once for its rank's recorder (:func:`rankscope.stacks.inproc_request.request_all`); each writes it
into its own private runtime directory, and the dumps are read from there through rankscope.fr's
restricted unpickler and analysed by rankscope.fr (the verdict `stacks --fr DUMPS` shows). Ranks
with no handler, or whose handler gave no dump, are named: the analysis counts them absent.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from rankscope.folding import RankSet
from rankscope.fr.join import LiveWait
from rankscope.fr.records import DEFAULT_LIMITS, Cache, RankDump, add_members, is_library
from rankscope.model import Frame, ProcessSnapshot
from rankscope.procs import torch_loaded
from rankscope.serial import from_json
from rankscope.stacks.collect import Stop, Target
from rankscope.stacks.inproc_request import request_all
from rankscope.stacks.report import StackGroup

if TYPE_CHECKING:  # the analysis is imported when a recorder is read, not with `stacks`
    from rankscope.fr.report import FrReport


@dataclass
class LiveRecorders:
    """What the ranks' handlers gave: one dump per rank that answered, and why the others did not."""

    dumps: list[RankDump] = field(default_factory=list)
    #: rank -> why it gave no dump.
    missing: dict[int, str] = field(default_factory=dict)
    #: rank -> why the dump it gave was not read (refused by the unpickler, over the cap ...).
    refused: dict[int, str] = field(default_factory=dict)
    #: rank -> what its dump lacks (written without Python frames: the rank was running).
    partial: dict[int, str] = field(default_factory=dict)
    #: The job's world size, where the ranks' launcher says it.
    world_size: Optional[int] = None
    #: Set by :func:`compact` only: the user's stacks of the entries, each once (innermost first, at most
    #: ``max_frames``), and per rank (as a string: a JSON key) the index of each entry's stack (-1: none).
    stacks: list[list[Frame]] = field(default_factory=list)
    stack_of: dict[str, list[int]] = field(default_factory=dict)
    #: rank (as a string) -> the peer its main thread waits for in recv/send, where the node read its
    #: stacks' local variables (``--locals``): the head sees only merged stacks, not the locals.
    p2p_peers: dict[str, int] = field(default_factory=dict)


def gather(
    targets: Sequence[Target],
    deadline: float,
    host: Optional[str] = None,
    stop: Optional[Stop] = None,
    loaded: Optional[dict[int, Optional[bool]]] = None,
) -> Optional[LiveRecorders]:
    """Every ranked target's recorder; None when no target's handler answers ``fr`` requests (then
    rankscope says nothing about recorders). Only a rank that loaded torch has a recorder: the others
    are not asked (a process whose request thread cannot run, one that holds the GIL say, would keep
    rankscope waiting for nothing). ``loaded``: :func:`rankscope.procs.torch_loaded` of the ranked
    targets, when the caller asked already (`stacks` does, before it imports this module)."""
    ranked = [t for t in targets if t.rank.rank is not None]
    if loaded is None:
        loaded = torch_loaded(t.pid for t in ranked)
    if not any(loaded.values()):
        return None
    answers = request_all([t for t in ranked if loaded[t.pid] is not False], "fr", deadline, host, stop)
    if not any(a.handler is not None and "fr" in a.handler.kinds for a in answers):
        return None
    from rankscope.fr.collect import read_live_dump
    from rankscope.inproc.frdump import WITHOUT_FRAMES

    live = LiveRecorders()
    for target in ranked:
        if loaded[target.pid] is False:
            assert target.rank.rank is not None
            live.missing[target.rank.rank] = "torch is not loaded in it: no flight recorder"
    sizes = [t.rank.world_size for t in ranked if t.rank.world_size]
    live.world_size = max(sizes) if sizes else None
    cache = Cache()
    for answer in answers:
        rank = answer.target.rank.rank
        assert rank is not None
        if answer.problem:
            live.missing[rank] = answer.problem
            continue
        result = answer.result if isinstance(answer.result, dict) else {}
        name, problem = result.get("name"), result.get("problem")
        if not isinstance(name, str) or answer.handler is None:
            live.missing[rank] = str(problem or "its handler wrote no dump")
            continue
        # The handler names a file of its own directory; anything else is not read.
        path = answer.handler.path(f"{answer.request_id}.fr")
        if name != os.path.basename(path):
            live.missing[rank] = f"its handler named an unexpected file {name!r}: not read"
            continue
        why = ""
        if isinstance(problem, str) and problem.startswith(WITHOUT_FRAMES):
            live.partial[rank] = problem
        try:
            dump = read_live_dump(path, answer.handler.uid, rank, cache)
            add_members(dump, result.get("groups"))  # gloo's recorder names no group's members
            live.dumps.append(dump)
        except (OSError, ValueError, pickle.UnpicklingError, EOFError, UnicodeDecodeError) as err:
            why = str(err) or type(err).__name__
        except Exception as err:  # a corrupt pickle can raise almost anything
            why = f"{type(err).__name__}: {err}"
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if why:  # the rank answered: its dump, not the rank, is what is missing
            live.missing[rank] = f"unreadable dump {path}: {why}"
            live.refused[rank] = f"{os.path.basename(path)}: {why}"
    return live


def compact(live: LiveRecorders) -> LiveRecorders:
    """What one node of a multi-node run sends the head: each entry's call site, and the user's part of
    its stack (at most ``max_frames`` frames) once in a table: entries of one line share one stack."""
    table: dict[tuple[Frame, ...], int] = {}
    stack_of: dict[str, list[int]] = {}
    dumps = []
    for dump in live.dumps:
        indices = []
        for entry in dump.entries:
            user = tuple(f for f in entry.frames if not is_library(f))[: DEFAULT_LIMITS.max_frames]
            indices.append(table.setdefault(user, len(table)) if user else -1)
        stack_of[str(dump.rank)] = indices
        dumps.append(replace(dump, entries=[replace(e, frames=(), site=e.call_site()) for e in dump.entries]))
    return replace(live, dumps=dumps, stacks=[list(s) for s in table], stack_of=stack_of)


def _restore_stacks(live: LiveRecorders) -> None:
    """Each entry's user stack back from a node's table; an index that names no stack (or a table that
    does not fit the entries) leaves the entry with its call site only."""
    stacks = [tuple(s[: DEFAULT_LIMITS.max_frames]) for s in live.stacks]
    for dump in live.dumps:
        indices = live.stack_of.get(str(dump.rank), [])
        if len(indices) != len(dump.entries):
            continue
        for entry, index in zip(dump.entries, indices):
            if isinstance(index, int) and 0 <= index < len(stacks) and stacks[index]:
                entry.frames = stacks[index]
    live.stacks, live.stack_of = [], {}


def combine(documents: Sequence[Any]) -> LiveRecorders:
    """Every node's :func:`compact` recorders (as JSON) as one; an unreadable node's are skipped."""
    combined = LiveRecorders()
    sizes = []
    for document in documents:
        try:
            live = from_json(LiveRecorders, document)
        except ValueError:
            continue
        _restore_stacks(live)
        combined.dumps.extend(live.dumps)
        # JSON keys are strings.
        combined.missing.update({int(rank): str(why) for rank, why in live.missing.items()})
        combined.refused.update({int(rank): str(why) for rank, why in live.refused.items()})
        combined.partial.update({int(rank): str(why) for rank, why in live.partial.items()})
        combined.p2p_peers.update(live.p2p_peers)
        if live.world_size:
            sizes.append(live.world_size)
    combined.world_size = max(sizes) if sizes else None
    return combined


#: torch.distributed's point-to-point calls that block in their own Python frame, and the argument
#: that names the other rank. (``irecv``/``isend`` return at once: their ``wait()`` shows only the
#: user's line in a Python stack, so it is not told apart from other waits.)
P2P_CALLS = {"recv": "src", "send": "dst", "batch_isend_irecv": ""}


def _p2p_frame(frames: Sequence[Frame]) -> Optional[int]:
    """Index of the point-to-point call the stack (outermost first) is blocked in: only torch's own
    frames lie inward of it; None when it is not."""
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        if frame.is_native:
            continue
        if frame.function in P2P_CALLS and frame.filename.endswith("distributed_c10d.py"):
            return index
        if not is_library(frame):
            return None
    return None


def _wait(
    frames: Sequence[Frame], local_vars: Optional[Sequence[Optional[dict[str, str]]]]
) -> Optional[LiveWait]:
    index = _p2p_frame(frames)
    if index is None:
        return None
    call = frames[index]
    site = next((f for f in reversed(frames[:index]) if not f.is_native and not is_library(f)), None)
    peer = None
    argument = P2P_CALLS[call.function]
    if argument and local_vars is not None and index < len(local_vars):
        value = (local_vars[index] or {}).get(argument, "")
        peer = int(value) if value.isdigit() else None
    return LiveWait(call.function, site, peer)


def node_peers(waits: dict[int, LiveWait]) -> dict[str, int]:
    """What a node sends the head of the waits it found (:attr:`LiveRecorders.p2p_peers`)."""
    return {str(rank): wait.peer for rank, wait in waits.items() if wait.peer is not None}


def p2p_waits(
    groups: Sequence[StackGroup],
    snapshots: Sequence[ProcessSnapshot] = (),
    peers: Optional[dict[str, int]] = None,
) -> dict[int, LiveWait]:
    """rank -> the point-to-point call its main thread waits in, from the stack groups; the peer from
    the snapshots' local variables where they were collected (``--locals``), or from ``peers`` (what
    the nodes of a multi-node run read, :func:`node_peers`)."""
    waits: dict[int, LiveWait] = {}
    for group in groups:
        wait = _wait(group.frames, None) if group.is_main else None
        if wait is not None:
            waits.update({m.rank: wait for m in group.members if m.rank is not None})
    for snapshot in snapshots:
        rank = snapshot.rank.rank
        main = next((t for t in snapshot.threads if t.is_main), None)
        if rank is None or rank not in waits or main is None or main.locals is None:
            continue
        found = _wait(main.frames, main.locals)
        if found is not None and found.peer is not None:
            waits[rank] = found
    for rank, wait in list(waits.items()):
        peer = (peers or {}).get(str(rank))
        if wait.peer is None and isinstance(peer, int) and not isinstance(peer, bool):
            waits[rank] = replace(wait, peer=peer)
    return waits


def verdict(live: LiveRecorders) -> FrReport:
    """rankscope.fr's verdict over the live dumps; the ranks that gave none are named in its notes."""
    from rankscope.fr.align import analyse

    report = analyse(live.dumps, world_size=live.world_size, refused=live.refused)
    if not (live.dumps or live.missing or live.refused):  # every node's records unreadable: nothing to say
        report.empty = True
    for reason, ranks in _by_reason(live.missing).items():
        report.notes.insert(0, f"no flight recorder from {RankSet.of(ranks).phrase()}: {reason}")
    for reason, ranks in _by_reason(live.partial).items():
        report.notes.append(f"flight recorder of {RankSet.of(ranks).phrase()} {reason}")
    return report


def _by_reason(missing: dict[int, str]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for rank, reason in sorted(missing.items()):
        grouped.setdefault(reason, []).append(rank)
    return grouped

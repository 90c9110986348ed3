"""The flight recorders of live ranks, in the same `rankscope stacks` pass as their stacks.

Every target whose in-process handler (``RANKSCOPE_INPROC=1``) answers ``fr`` requests is asked at
once for its rank's recorder (:func:`rankscope.stacks.inproc_collect.request_all`); each writes it
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

from rankscope import procfs
from rankscope.folding import fold_ints
from rankscope.fr.records import Cache, RankDump
from rankscope.serial import from_json
from rankscope.stacks.collect import Stop, Target
from rankscope.stacks.inproc_collect import request_all

if TYPE_CHECKING:  # the analysis is imported when a recorder is read, not with `stacks`
    from rankscope.fr.report import FrReport

#: In /proc/PID/maps: torch's own library, loaded by ``import torch``.
TORCH_LIBRARIES = (b"libtorch",)


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


def gather(
    targets: Sequence[Target], deadline: float, host: Optional[str] = None, stop: Optional[Stop] = None
) -> Optional[LiveRecorders]:
    """Every ranked target's recorder; None when no target's handler answers ``fr`` requests (then
    rankscope says nothing about recorders)."""
    ranked = [t for t in targets if t.rank.rank is not None]
    # Only a process that loaded torch has a recorder: the others are not asked (a process whose
    # request thread cannot run, one that holds the GIL say, would keep rankscope waiting for nothing).
    loaded = {t.pid: procfs.maps_any(t.pid, TORCH_LIBRARIES) for t in ranked}
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
            live.dumps.append(read_live_dump(path, answer.handler.uid, rank, cache))
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
    """What one node of a multi-node run sends the head: each entry's call site, not its whole stack."""
    dumps = [
        replace(d, entries=[replace(e, frames=(), site=e.call_site()) for e in d.entries]) for d in live.dumps
    ]
    return replace(live, dumps=dumps)


def combine(documents: Sequence[Any]) -> LiveRecorders:
    """Every node's :func:`compact` recorders (as JSON) as one; an unreadable node's are skipped."""
    combined = LiveRecorders()
    sizes = []
    for document in documents:
        try:
            live = from_json(LiveRecorders, document)
        except ValueError:
            continue
        combined.dumps.extend(live.dumps)
        # JSON keys are strings.
        combined.missing.update({int(rank): str(why) for rank, why in live.missing.items()})
        combined.refused.update({int(rank): str(why) for rank, why in live.refused.items()})
        combined.partial.update({int(rank): str(why) for rank, why in live.partial.items()})
        if live.world_size:
            sizes.append(live.world_size)
    combined.world_size = max(sizes) if sizes else None
    return combined


def verdict(live: LiveRecorders) -> FrReport:
    """rankscope.fr's verdict over the live dumps; the ranks that gave none are named in its notes."""
    from rankscope.fr.align import analyse

    report = analyse(live.dumps, world_size=live.world_size, refused=live.refused)
    for reason, ranks in _by_reason(live.missing).items():
        word = "ranks" if len(ranks) > 1 else "rank"
        report.notes.insert(0, f"no flight recorder from {word} {fold_ints(ranks)}: {reason}")
    for reason, ranks in _by_reason(live.partial).items():
        word = "ranks" if len(ranks) > 1 else "rank"
        report.notes.append(f"flight recorder of {word} {fold_ints(ranks)} {reason}")
    return report


def _by_reason(missing: dict[int, str]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for rank, reason in sorted(missing.items()):
        grouped.setdefault(reason, []).append(rank)
    return grouped

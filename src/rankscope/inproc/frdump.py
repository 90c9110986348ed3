"""Write this rank's PyTorch flight recorder to a file, from inside the training process.

What rankscope's in-process handler calls when asked for the recorder (and what a user may call
from their own signal handler or timeout path)::

    from rankscope.inproc.frdump import dump_flight_recorder
    problem = dump_flight_recorder("/tmp/fr/rank_3")   # None when written

The file is the pickle torch's own ``_dump_fr_trace(True, True, False)`` returns (every entry,
with Python frames), or its JSON (``_dump_fr_trace_json(True, False)``: no frames) when the path
ends in ``.json``; `rankscope fr` and torch's analyzer read both. It is written to a temporary
name beside the path and renamed, mode 0600, so a reader never sees half a dump. It may run in a
thread other than the one blocked in a collective (torch's dump takes its own lock and the GIL is
released by a blocked collective).

Python 3.9, standard library only; never imports torch into a process that has not imported it,
and never raises: every problem is returned as one line of text.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
from collections.abc import Mapping
from typing import Any, Callable, Optional

#: The variables that turn the recorder on: torch >= 2.5, then the older NCCL-only names.
BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def recorder_disabled(environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when a buffer variable is set to 0 (torch 2.13 records by default; older releases need a size)."""
    env = os.environ if environ is None else environ
    values = [str(env.get(name, "")).strip() for name in BUFFER_VARIABLES]
    return any(v == "0" for v in values) and not any(v.isdigit() and int(v) > 0 for v in values)


#: torch's dump functions, pickle then JSON, one pair per recorder. A CUDA build (torch 2.11, seen on
#: an H100) keeps two recorders: NCCL's (``_dump_nccl_trace``, its entries ``nccl:...``) and the
#: generic one of the other backends (``_dump_fr_trace``, gloo's ``gloo:...``); a CPU build has the
#: second only, and torch 2.2-2.4 the first only. Each is dumped, and the dumps are joined.
RECORDERS = (("_dump_nccl_trace", "_dump_nccl_trace_json"), ("_dump_fr_trace", "_dump_fr_trace_json"))


def _dumpers() -> list[tuple[Optional[Callable[..., Any]], Optional[Callable[..., Any]]]]:
    """torch's (pickle, JSON) dump functions of each of its recorders; [] before torch.distributed."""
    module = sys.modules.get("torch._C._distributed_c10d")
    if module is None:
        try:
            import torch._C._distributed_c10d as module  # torch is already imported
        except Exception:
            return []
    found = [(getattr(module, p, None), getattr(module, j, None)) for p, j in RECORDERS]
    return [pair for pair in found if pair[0] is not None or pair[1] is not None]


class _PlainData(pickle.Unpickler):
    """torch's dump is dicts, lists, tuples, strings and numbers: no class is ever loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no objects ({module}.{name})")


def join_dumps(dumps: list[dict[str, Any]]) -> dict[str, Any]:
    """One dump of several recorders' (NCCL's and gloo's): their entries in the order they were
    created, numbered again (each recorder counts its own ``record_id``), their process groups'
    configs and statuses together (NCCL's first: gloo's config names no members)."""
    if len(dumps) == 1:
        return dumps[0]
    joined: dict[str, Any] = dict(dumps[0])
    entries = [e for d in dumps for e in d.get("entries", []) if isinstance(e, dict)]
    entries.sort(key=lambda e: e.get("time_created_ns") or 0)
    for number, entry in enumerate(entries):
        entry["record_id"] = number
    joined["entries"] = entries
    for table in ("pg_config", "pg_status"):
        merged: dict[Any, Any] = {}
        for dump in dumps:
            values = dump.get(table)
            if isinstance(values, dict):
                for key, value in values.items():
                    merged.setdefault(key, value)
        joined[table] = merged
    joined["comm_lib_version"] = next((d["comm_lib_version"] for d in dumps if d.get("comm_lib_version")), "")
    return joined


def _dump_all(want_json: bool, only_active: bool, with_frames: bool) -> Optional[bytes]:
    """Every recorder's dump, joined when more than one holds entries; None without a recorder."""
    raw: list[bytes] = []
    for pickled, as_json in _dumpers():
        if want_json and as_json is not None:
            data = as_json(True, only_active)
        elif pickled is not None:
            try:
                data = pickled(True, with_frames, only_active)
            except TypeError:  # an older signature without the stack-trace flag
                data = pickled()
        else:
            continue
        raw.append(data.encode("utf-8") if isinstance(data, str) else bytes(data))
    if not raw:
        return None
    if len(raw) == 1:
        return raw[0]

    def load(data: bytes) -> Any:
        return json.loads(data) if want_json else _PlainData(io.BytesIO(data)).load()

    # The largest (NCCL's, in an NCCL job: up to megabytes with frames) is read only when another
    # recorder holds entries too; else it is written as torch wrote it.
    order = sorted(range(len(raw)), key=lambda i: len(raw[i]))
    smaller = [load(raw[i]) for i in order[:-1]]
    held = [d for d in smaller if isinstance(d, dict) and d.get("entries")]
    if not held:
        return raw[order[-1]]
    largest = load(raw[order[-1]])
    if isinstance(largest, dict) and largest.get("entries"):
        held.insert(0, largest)
    joined = join_dumps(held)
    return json.dumps(joined).encode("utf-8") if want_json else pickle.dumps(joined)


#: At most this many member ranks in all are named by :func:`group_members` (its answer stays well
#: below the 1 MiB a reply may hold; the default group of a larger job is its whole world anyway).
MAX_MEMBERS = 1 << 16


def group_members() -> dict[str, list[int]]:
    """Every process group this rank belongs to, by the name its recorder entries carry -> the
    global ranks of its members, as torch.distributed knows them in this process; {} when unknown.

    gloo's recorder (torch 2.13) names no group's members in its dump, only NCCL's does: without
    them a rank that never issued a subgroup's collective cannot be told from a non-member. Reads
    torch.distributed's own tables (never imports it); never raises.
    """
    try:
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        world = getattr(c10d, "_world", None)
        names = getattr(world, "pg_names", None)
        ranks = getattr(world, "pg_group_ranks", None)
        if not isinstance(names, dict) or not isinstance(ranks, dict):
            return {}
        found: dict[str, list[int]] = {}
        left = MAX_MEMBERS
        for group, name in list(names.items()):
            members = ranks.get(group)
            if not isinstance(name, str) or not isinstance(members, dict) or len(members) > left:
                continue
            found[name] = sorted(int(r) for r in members)
            left -= len(members)
        return found
    except Exception:  # noqa: BLE001 - never into the training process
        return {}


#: What a dump without Python frames says (the file is written).
WITHOUT_FRAMES = "written without Python frames"


def dump_flight_recorder(path: str, only_active: bool = False, with_frames: bool = True) -> Optional[str]:
    """Write the recorder to ``path``; None when written, else why not (one line). Never raises.

    ``with_frames=False`` leaves each entry's Python frames out (torch's first dump with frames in a
    process imports ``torch._inductor`` and ``torch._dynamo``: seconds of the job's GIL); the answer
    then starts with :data:`WITHOUT_FRAMES`.
    """
    try:
        if "torch" not in sys.modules:
            return "torch is not imported in this process: no flight recorder"
        data = _dump_all(str(path).endswith(".json"), only_active, with_frames)
        if data is None:
            return "this torch has no flight recorder (torch >= 2.2 has one)"
        tmp = f"{path}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if recorder_disabled():
            return "written, but TORCH_FR_BUFFER_SIZE=0 turned the recorder off: it holds no entries"
        if not with_frames:
            return (
                f"{WITHOUT_FRAMES}: the rank was running, and torch's first dump with frames would import "
                "torch._inductor and torch._dynamo into it (seconds of its time)"
            )
        return None
    except BaseException as err:  # noqa: BLE001 - never into the training process
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            return f"interrupted: {type(err).__name__}"
        return f"{type(err).__name__}: {err}"

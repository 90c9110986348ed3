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

import os
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


def _dumpers() -> tuple[Optional[Callable[..., Any]], Optional[Callable[..., Any]]]:
    """torch's pickle and JSON dump functions, under their current or older (2.2-2.4) names."""
    module = sys.modules.get("torch._C._distributed_c10d")
    if module is None:
        try:
            import torch._C._distributed_c10d as module  # torch is already imported
        except Exception:
            return None, None
    pickled = getattr(module, "_dump_fr_trace", None) or getattr(module, "_dump_nccl_trace", None)
    as_json = getattr(module, "_dump_fr_trace_json", None) or getattr(module, "_dump_nccl_trace_json", None)
    return pickled, as_json


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
        pickled, as_json = _dumpers()
        want_json = str(path).endswith(".json")
        if want_json and as_json is not None:
            data = as_json(True, only_active)
        elif pickled is not None:
            try:
                data = pickled(True, with_frames, only_active)
            except TypeError:  # an older signature without the stack-trace flag
                data = pickled()
        else:
            return "this torch has no flight recorder (torch >= 2.2 has one)"
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray)):
            return f"torch returned {type(data).__name__}, not bytes"
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

"""How far this rank's flight recorder has got: one small answer, for a watcher's regular look.

The ``fr_status`` request of the in-process handler. torch's JSON dump without its entries
(``_dump_fr_trace_json(False, False)``, and NCCL's ``_dump_nccl_trace_json`` in a CUDA build) holds only each process group's newest collective enqueued
and completed (its ``pg_status``): a few hundred bytes, a few microseconds of the rank's time (torch
2.13, measured), against tens of milliseconds and up to a megabyte for the dump with its 2,000
entries. The answer is::

    {"groups": {"<pg id>": [last enqueued, last completed], ...}, "problem": None}

or ``{"groups": {}, "problem": "why"}`` (torch not imported, no process group yet, the recorder
turned off, a torch without ``pg_status``). A watcher compares the numbers between its looks: a
rank whose numbers do not change issued and finished no collective meanwhile.

Python 3.9, standard library only; torch is never imported here (only a process that imported
``torch.distributed`` is read), and nothing raises into the process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: The numbers of a process group's status, in the order they are answered.
FIELDS = ("last_enqueued_collective", "last_completed_collective")


#: torch's JSON dump of each of its recorders: NCCL's and the other backends' are two in a CUDA build
#: (torch 2.11, seen on an H100), the second alone in a CPU build (rankscope.inproc.frdump).
RECORDERS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")


def _dumpers() -> list[Any]:
    module = sys.modules.get("torch._C._distributed_c10d")
    if module is None:
        return []
    return [f for f in (getattr(module, name, None) for name in RECORDERS) if f is not None]


def recorder_status(args: dict[str, Any]) -> dict[str, Any]:
    """This rank's process groups' newest collectives (see the module's notes). Never raises."""
    try:
        dumps = _dumpers()
        if not dumps:
            return {"groups": {}, "problem": "torch.distributed is not imported in this process"}
        statuses = []
        for dump in dumps:
            data = json.loads(dump(False, False))
            status = data.get("pg_status") if isinstance(data, dict) else None
            if isinstance(status, dict):
                statuses.append(status)
        if not statuses:
            return {"groups": {}, "problem": "this torch's recorder keeps no status of its process groups"}
        groups: dict[str, list[int]] = {}
        for status in statuses:  # a group both recorders know: the one further on
            for group, values in status.items():
                if isinstance(values, dict):
                    numbers = [int(values.get(name, -1)) for name in FIELDS]
                    groups[str(group)] = max(groups.get(str(group), numbers), numbers)
        if not groups:
            return {
                "groups": {},
                "problem": "no collective recorded yet (no process group, or the recorder is off)",
            }
        return {"groups": groups, "problem": None}
    except BaseException as err:  # noqa: BLE001 - never into the training process
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            return {"groups": {}, "problem": f"interrupted: {type(err).__name__}"}
        return {"groups": {}, "problem": f"{type(err).__name__}: {err}"}

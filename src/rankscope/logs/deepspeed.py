"""DeepSpeed's launcher (``deepspeed.launcher.launch``) in text: which worker its report is about (pure).

What it prints, read from its source (launch.py, 0.9 to 0.16) and checked against logs pasted in
public issue threads:

- one ``process PID spawned with command: [...]`` line per worker it starts, the command ending in
  ``--local_rank=N`` unless the user asked ``--no_local_rank``;
- when a worker exits with a non-zero code: ``Killing subprocess PID`` for every worker, then
  ``[...] exits with return code = CODE``. The list before ``exits`` is the **last command the
  launcher built**, the highest local rank's, whichever worker failed: on a node of 8 workers it
  always says ``--local_rank=7``. So that line names the failed worker only when the node runs one
  (``--local_rank=0``, or a single spawn line); otherwise its local rank is unknown, unless the
  kernel's OOM killer names the pid (a spawn line gives that pid's local rank).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

#: A worker started: its pid and its command (a Python list's repr).
SPAWN = re.compile(rb"process (\d+) spawned with command: (\[[^\n]*)")
#: A worker ended by the launcher after another failed (every worker of the node gets one).
KILLING = re.compile(rb"Killing subprocess (\d+)")
NEEDLES = (b" spawned with command: ", b"Killing subprocess ")
#: The failure report; the optional local rank is that of the last command built, not the failed one's.
EXIT = re.compile(rb"(?:--local_rank=(\d+)[^\n]*?)?exits with return code = (-?\d+)")
_LOCAL_RANK = re.compile(rb"--local_rank=(\d+)")


class Exit(NamedTuple):
    #: The failed worker's local rank where the report can say it, else None.
    who: Optional[str]
    #: The failed worker in words when its local rank is unknown (``a local rank on worker-1``).
    named: str
    #: What the words "local rank N" on that line are, when they do not name the failed worker.
    note: str
    #: The node's workers as its spawn lines give them: pid -> local rank (None: ``--no_local_rank``).
    workers: dict[int, Optional[str]]


class DeepSpeedLaunchers:
    """The workers each node's launcher names (by the line's node label: pdsh's host, or none)."""

    def __init__(self) -> None:
        self.spawned: dict[Optional[str], dict[int, Optional[str]]] = {}

    def worker(self, line: bytes, node: Optional[str]) -> None:
        """A spawn line (pid and local rank) or a ``Killing subprocess`` line (pid) of ``node``'s launcher."""
        workers = self.spawned.setdefault(node, {})
        found = SPAWN.search(line)
        if found is not None:
            local = _LOCAL_RANK.search(found.group(2))
            workers[int(found.group(1))] = local.group(1).decode() if local else None
        elif (killed := KILLING.search(line)) is not None:
            workers.setdefault(int(killed.group(1)), None)

    def exit(self, last_built: Optional[str], node: Optional[str]) -> Exit:
        """Who an ``exits with return code`` line of ``node``'s launcher is about; ``last_built`` the
        local rank in its command list (None: none there)."""
        workers = dict(self.spawned.get(node, {}))
        named = "a local rank" if node is None else f"a local rank on {node}"
        if last_built == "0":
            return Exit("0", "", "", workers)  # the last worker built is the first: the node runs one
        if len(workers) == 1:  # one spawn or one "Killing subprocess" line: the node runs one worker
            (only,) = workers.values()
            if only is not None or last_built is not None:
                return Exit(only or last_built, "", "", workers)
        note = (
            f" (its launcher's line names the last worker it started, local rank {last_built}, whichever failed)"
            if last_built is not None
            else ""
        )
        return Exit(None, named, note, workers)

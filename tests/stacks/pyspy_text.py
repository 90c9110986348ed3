"""Read py-spy's text dumps (``py-spy dump [--native]`` without --json) as the JSON rankscope parses.

Only for recordings made where rankscope could not run (a GPU node): py-spy prints paths shortened
(``torch/distributed/distributed_c10d.py``, ``threading.py``, ``gpu_hang.py``), so full paths are
rebuilt the way py-spy's JSON gives them: packages under site-packages, the standard library under
/usr/lib/python3.12, the job's own files under /home/user/job, native libraries under /usr/lib.
"""

from __future__ import annotations

import json
import re

from rankscope.model import ProcessSnapshot, RankId
from rankscope.stacks.pyspy import parse_dump

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_THREAD = re.compile(r'^Thread (\d+) \((\w+)\)(?:: "(.*)")?$')
_FRAME = re.compile(r"^ {4}(.*) \(([^()]*)\)$")
_PYTHON_LOCATION = re.compile(r"^(.*):(\d+)$")
STDLIB = frozenset({"threading.py", "selectors.py", "socket.py", "queue.py", "subprocess.py"})


def _frame(name: str, location: str) -> dict[str, object]:
    python = _PYTHON_LOCATION.match(location)
    if python is None:  # native: "libc.so.6"
        path = f"/usr/lib/x86_64-linux-gnu/{location}"
        return {"name": name, "filename": path, "module": path, "line": 0}
    short, line = python.group(1), int(python.group(2))
    if "/" in short:
        path = f"/home/user/venv/lib/python3.12/site-packages/{short}"
    elif short in STDLIB:
        path = f"/usr/lib/python3.12/{short}"
    else:
        path = f"/home/user/job/{short}"
    return {"name": name, "filename": path, "module": None, "line": line}


def parse_text_dumps(text: str) -> dict[int, tuple[str, list[dict[str, object]]]]:
    """pid -> (command line, py-spy JSON threads), in the order the processes appear."""
    processes: dict[int, tuple[str, list[dict[str, object]]]] = {}
    threads: list[dict[str, object]] = []
    for line in text.splitlines():
        if match := _PROCESS.match(line):
            threads = []
            processes[int(match.group(1))] = (match.group(2), threads)
        elif match := _THREAD.match(line):
            tid = int(match.group(1))
            entry = {
                "thread_id": tid,
                "os_thread_id": tid,
                "thread_name": match.group(3) or "",
                "active": match.group(2) == "active",
                "owns_gil": False,
                "frames": [],
            }
            threads.append(entry)
        elif (match := _FRAME.match(line)) and threads:
            frames = threads[-1]["frames"]
            assert isinstance(frames, list)
            frames.append(_frame(match.group(1), match.group(2)))
    return processes


def snapshots(text: str, host: str) -> list[ProcessSnapshot]:
    """The processes of a text dump as ranks 0..N-1 of one torchrun job, in the order they appear."""
    processes = parse_text_dumps(text)
    world = len(processes)
    out = []
    for rank, (pid, (cmdline, threads)) in enumerate(processes.items()):
        rank_id = RankId(host, rank, rank, world, 0, world, "torchrun")
        out.append(
            ProcessSnapshot(pid, rank_id, parse_dump(json.dumps(threads).encode(), pid), cmdline=cmdline)
        )
    return out

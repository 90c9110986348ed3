"""py-spy as the engine: parse its JSON, classify its failures (running it: pyspy_cmd)."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from rankscope.model import Frame, ThreadStack

_NAME_DIGITS = re.compile(r"\d+")
_RAW_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
#: Unresolved native frames are keyed by library only: their addresses differ per process (ASLR).
UNKNOWN_NATIVE = "??"


def thread_role(name: str, is_main: bool) -> str:
    """A name shared by equivalent threads across ranks: ``Thread-7 (worker)`` -> ``Thread-N (worker)``."""
    if is_main:
        return "MainThread"
    return _NAME_DIGITS.sub("N", name) if name else "unnamed"


def parse_dump(raw: bytes, pid: int, intern: Optional[dict[Frame, Frame]] = None) -> list[ThreadStack]:
    """py-spy ``dump --json`` output -> threads, main thread first, frames outermost first.

    ``intern`` shares identical frames between processes (memory and hashing for big merges).
    """
    data: Any = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is not a list of threads")
    intern = intern if intern is not None else {}
    threads = []
    for entry in data:
        frames = []
        local_vars: list[Optional[dict[str, str]]] = []
        any_locals = False
        for raw_frame in reversed(entry.get("frames") or []):
            module = raw_frame.get("module")
            name = str(raw_frame.get("name", "?"))
            if module and _RAW_ADDRESS.fullmatch(name):
                name = UNKNOWN_NATIVE
            frame = Frame(
                function=name,
                filename=str(raw_frame.get("filename", "?")),
                line=int(raw_frame.get("line") or 0),
                library=str(module) if module else None,
            )
            frames.append(intern.setdefault(frame, frame))
            values = raw_frame.get("locals")
            if values:
                any_locals = True
                local_vars.append({str(v.get("name")): str(v.get("repr")) for v in values})
            else:
                local_vars.append(None)
        os_tid = entry.get("os_thread_id")
        thread_id = int(os_tid if os_tid is not None else entry.get("thread_id", 0))
        is_main = os_tid == pid or entry.get("thread_name") == "MainThread"
        threads.append(
            ThreadStack(
                thread_id=thread_id,
                name=str(entry.get("thread_name") or ""),
                frames=tuple(frames),
                is_main=is_main,
                active=bool(entry.get("active")),
                owns_gil=bool(entry.get("owns_gil")),
                locals=tuple(local_vars) if any_locals else None,
            )
        )
    threads.sort(key=lambda t: not t.is_main)
    return threads


def classify_error(stderr: str) -> tuple[str, str]:
    """py-spy's error text -> (kind, short reason). kinds: gone, permission, not-python, other."""
    text = stderr.strip()
    lowered = text.lower()
    first = next((line for line in text.splitlines() if line.strip()), "py-spy failed")
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return "permission", "ptrace was refused (permission denied)"
    if (
        "no such process" in lowered
        or "no such file or directory" in lowered
        or "check that the process is running" in lowered
    ):
        return "gone", "the process exited"
    if "failed to find python" in lowered or "python interpreter" in lowered or "bad address" in lowered:
        return "not-python", "py-spy found no Python interpreter in it"
    return "other", first.removeprefix("Error: ")[:300]

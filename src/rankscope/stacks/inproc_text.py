"""faulthandler's text (the in-process handler's dump) as the same threads a py-spy dump gives.

faulthandler writes, per thread (most recent call first)::

    Thread 0x00007f42e2e1c6c0 (most recent call first):
      File "/job/train.py", line 37 in heartbeat
      ...

    Current thread 0x00007f42e42a7b80 (most recent call first):
      File "/job/train.py", line 6 in inner

A thread without Python frames shows ``  <no Python frame>``; a stack deeper than 100 frames ends
with ``  ...`` (its outermost frames are not written); more than 100 threads end the dump with
``...``. Function names are code names (``wrapper``), where py-spy shows qualified names
(``_exception_logger.<locals>.wrapper``) on recent Pythons; files are the code's own paths, as
py-spy's ``filename``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Optional

from rankscope.model import Frame, ThreadStack

_THREAD = re.compile(
    r"^(?:Current thread|Thread) 0x(?P<ident>[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):$"
)
_FRAME = re.compile(r'^  File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>.*)$')
#: The outermost frame of a stack faulthandler cut at 100 frames.
CUT = Frame("...", "<outer frames not written by faulthandler>", 0)


def parse_faulthandler(
    text: str,
    pid: int,
    main_ident: Optional[int] = None,
    names: Optional[Mapping[int, tuple[str, Optional[int]]]] = None,
    skip: Optional[int] = None,
    intern: Optional[dict[Frame, Frame]] = None,
) -> list[ThreadStack]:
    """Threads (main first, frames outermost first) from faulthandler's ``all_threads`` text.

    ``main_ident`` is the main thread's identifier (the handler's description says it); ``names``
    maps identifiers to (thread name, native thread id) when the process answered the ``threads``
    request; ``skip`` is a thread left out (the handler's own). ValueError when no thread is found.
    """
    intern = intern if intern is not None else {}
    known: dict[int, tuple[str, Optional[int]]] = dict(names or {})
    threads: list[ThreadStack] = []
    ident: Optional[int] = None
    frames: list[Frame] = []
    cut = False

    def close() -> None:
        if ident is None or ident == skip:
            return
        ordered = [*([CUT] if cut else []), *reversed(frames)]
        name, native = known.get(ident, ("", None))
        is_main = ident == main_ident
        threads.append(
            ThreadStack(
                thread_id=native if native is not None else (pid if is_main else ident),
                name=name or ("MainThread" if is_main else ""),
                frames=tuple(intern.setdefault(f, f) for f in ordered),
                is_main=is_main,
            )
        )

    for line in text.splitlines():
        header = _THREAD.match(line)
        if header is not None:
            close()
            ident, frames, cut = int(header.group("ident"), 16), [], False
            if header.group("name") and ident not in known:
                known[ident] = (header.group("name"), None)
            continue
        match = _FRAME.match(line)
        if match is not None and ident is not None:
            number = match.group("line")
            frames.append(
                Frame(match.group("func"), match.group("file"), int(number) if number.isdigit() else 0)
            )
        elif line.strip() == "..." and ident is not None and line.startswith("  "):
            cut = True
    close()
    if not threads and ident is None:
        raise ValueError("no thread in the dump (not faulthandler's output)")
    threads.sort(key=lambda t: not t.is_main)
    return threads


def as_pyspy_json(threads: list[ThreadStack]) -> bytes:
    """The threads in py-spy's ``dump --json`` form, so ``--out`` and ``--from`` treat both sources alike."""
    data: list[dict[str, Any]] = [
        {
            "thread_id": t.thread_id,
            "os_thread_id": t.thread_id,
            "thread_name": t.name,
            "active": False,
            "owns_gil": False,
            "frames": [
                {"name": f.function, "filename": f.filename, "line": f.line, "short_filename": f.filename}
                for f in reversed(t.frames)
            ],
        }
        for t in threads
    ]
    return json.dumps(data, indent=1).encode()

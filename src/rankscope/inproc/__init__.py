"""Helpers to import inside a training process: readable output from many ranks, progress, stacks.

- :func:`printflock`: ``print`` under an exclusive file lock, so lines of the processes on
  one node never interleave.
- :class:`Tee`: stdout (and optionally stderr) also to a per-rank file, flushed per write.
- :func:`prefix_output`: every line of ``print``, ``logging`` and tracebacks gets ``[host:rank] ``.
- :func:`enable`: the in-process handler (stacks without ptrace, requests); see docs/inproc.md.

Python 3.9 compatible, standard library only. Names are imported when first used, so importing a
submodule (the progress markers, the handler's bootstrap) does not import the others.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Tee", "enable", "prefix_label", "prefix_output", "printflock"]

_LAZY = {
    "printflock": "rankscope.inproc.flock",
    "prefix_label": "rankscope.inproc.prefixing",
    "prefix_output": "rankscope.inproc.prefixing",
    "Tee": "rankscope.inproc.tee",
    "enable": "rankscope.inproc.handler",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rankscope.inproc' has no attribute {name!r}")
    import sys

    __import__(module)  # not importlib: a process that dropped its privileges may not read it
    value = getattr(sys.modules[module], name)
    globals()[name] = value
    return value

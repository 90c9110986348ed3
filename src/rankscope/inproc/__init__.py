"""Helpers to import inside a training process: readable output from many ranks.

- :func:`printflock`: ``print`` under an exclusive file lock, so lines of the processes on
  one node never interleave.
- :class:`Tee`: stdout (and optionally stderr) also to a per-rank file, flushed per write.
- :func:`prefix_output`: every line of ``print``, ``logging`` and tracebacks gets ``[host:rank] ``.

Python 3.9 compatible, standard library only.
"""

from __future__ import annotations

from rankscope.inproc.flock import printflock
from rankscope.inproc.prefixing import prefix_label, prefix_output
from rankscope.inproc.tee import Tee

__all__ = ["Tee", "prefix_label", "prefix_output", "printflock"]

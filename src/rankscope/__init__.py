"""rankscope: find out what is wrong with a multi-node, multi-GPU PyTorch job."""

from __future__ import annotations

#: typing costs milliseconds to import (in a training process too); the annotations do not need it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

#: Names exported lazily (PEP 562): ``import rankscope`` stays cheap inside training processes; after the
#: first access a name is a plain module attribute (no __getattr__ on later calls).
_LAZY = {
    "progress": ("rankscope.inproc.progress", "progress"),
    "breakpoint": ("rankscope.debug.debugger", "breakpoint"),
    "ForkedPdb": ("rankscope.debug.debugger", "ForkedPdb"),
    "trace": ("rankscope.trace", ""),  # the module itself: rankscope.trace.start(), .stop(), .region()
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'rankscope' has no attribute {name!r}")
    import sys

    __import__(target[0])  # not importlib: a process that dropped its privileges may not read it
    module = sys.modules[target[0]]
    value = getattr(module, target[1]) if target[1] else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

"""rankscope: find out what is wrong with a multi-node, multi-GPU PyTorch job."""

__version__ = "0.1.0"

#: Names imported on first use (PEP 562): ``import rankscope`` stays cheap inside a training process.
_LAZY = {
    "breakpoint": "rankscope.debug.debugger",
    "ForkedPdb": "rankscope.debug.debugger",
}


def __getattr__(name: str) -> object:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'rankscope' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)

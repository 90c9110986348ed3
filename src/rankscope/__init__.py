"""rankscope: find out what is wrong with a multi-node, multi-GPU PyTorch job."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``rankscope.trace`` without importing it at ``import rankscope`` (PEP 562; training processes import this)."""
    if name == "trace":
        import importlib

        return importlib.import_module("rankscope.trace")
    raise AttributeError(f"module 'rankscope' has no attribute {name!r}")

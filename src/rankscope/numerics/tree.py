"""Nested outputs (tuples, lists, dicts, NamedTuples of tensors) as leaves with a path, and back.

Pure: it knows containers, not torch. A path reads like the Python that reaches the leaf:
``[0]``, ``['logits']``, ``.hidden``, ``[1]['attn']``; a lone value has the path ``""``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs in a stable order: sequences by position, mappings by insertion order."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        pairs: list[tuple[str, Any]] = []
        for name, item in zip(value._fields, value):
            pairs.extend(flatten(item, f"{path}.{name}"))
        return pairs
    if isinstance(value, (list, tuple)):
        return [pair for index, item in enumerate(value) for pair in flatten(item, f"{path}[{index}]")]
    if isinstance(value, Mapping):
        return [pair for key, item in value.items() for pair in flatten(item, f"{path}[{key!r}]")]
    return [(path, value)]


def tree_map(function: Callable[[Any], Any], value: Any) -> Any:
    """``value`` with every leaf replaced by ``function(leaf)``, containers rebuilt with their own type."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(tree_map(function, item) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(tree_map(function, item) for item in value)
    if isinstance(value, dict):
        return type(value)((key, tree_map(function, item)) for key, item in value.items())
    return function(value)

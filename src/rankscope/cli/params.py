"""Click parameters -> a verb's frozen options object, always by name (never by position)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def from_params(cls: type[T], params: Mapping[str, Any], **given: Any) -> T:
    """``cls`` with each field not in ``given`` taken from the click parameter of the same name.

    A field with no parameter of its name keeps its default (`stacks` has no overall deadline for
    its ClusterTarget), or fails when it has none; tests/test_cli_options.py reads every option back.
    """
    taken = {
        spec.name: params[spec.name]
        for spec in fields(cls)  # type: ignore[arg-type]
        if spec.name not in given and spec.name in params
    }
    return cls(**taken, **given)

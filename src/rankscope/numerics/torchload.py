"""The one place the numerics room imports torch: lazily, with one clear error when it is missing.

``import rankscope.numerics`` never imports torch; the first comparison or detector does.
"""

from __future__ import annotations

import sys
from typing import Any

from rankscope.errors import ExitCode, RankscopeError


class TorchMissingError(RankscopeError, ImportError):
    """torch is not importable in this interpreter (an ImportError too, for code that catches those)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"torch cannot be imported in {sys.executable} ({reason})",
            "install it in the environment that runs the job (pip install torch); "
            "rankscope.numerics runs your computation under torch",
            ExitCode.MISSING_TOOL,
        )


def load_torch() -> Any:
    """The torch module, or :class:`TorchMissingError`."""
    try:
        import torch
    except ImportError as exc:
        raise TorchMissingError(str(exc) or type(exc).__name__) from exc
    return torch

"""Default tolerances: torch.testing.assert_close's, by dtype name (pure; no torch import).

Two values agree when ``|other - reference| <= atol + rtol * |reference|``. For two dtypes the
looser of their tolerances applies (as assert_close does), that is the lower precision's.
"""

from __future__ import annotations

from typing import Optional

#: dtype name -> (rtol, atol), as documented for torch.testing.assert_close; any other dtype: exact.
DEFAULTS: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def default_tolerances(*dtype_names: str) -> tuple[float, float]:
    """The loosest ``(rtol, atol)`` of these dtypes (``float32`` and ``float64``: float32's)."""
    pairs = [DEFAULTS.get(name, (0.0, 0.0)) for name in dtype_names]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def resolve(rtol: Optional[float], atol: Optional[float]) -> Optional[tuple[float, float]]:
    """The caller's tolerances, or None for the dtype defaults; one of the two alone is refused."""
    if rtol is None and atol is None:
        return None
    if rtol is None or atol is None:
        raise ValueError(
            "give both rtol and atol, or neither for torch.testing's defaults (rtol=0, atol=0: exact)"
        )
    if rtol < 0 or atol < 0:
        raise ValueError(f"tolerances are not negative: rtol={rtol}, atol={atol}")
    return float(rtol), float(atol)

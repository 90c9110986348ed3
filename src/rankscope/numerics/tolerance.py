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


#: dtype name -> machine epsilon (``torch.finfo(dtype).eps``) of the floating dtypes.
EPSILON: dict[str, float] = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
}

#: compare_modules' default: a layer's output that differs by no more than this many epsilons of the
#: coarser dtype, of each value or of the tensor's largest value, differs by rounding only.
NOISE_EPS = 8


def coarsest(*dtype_names: str) -> Optional[tuple[str, float]]:
    """The dtype of these with the largest epsilon, and that epsilon; None when none is floating."""
    known = [(EPSILON[name], name) for name in dtype_names if name in EPSILON]
    if not known:
        return None
    eps, name = max(known)
    return name, eps


def noise_tolerances(dtype_names: tuple[str, ...], largest: float) -> tuple[float, float]:
    """assert_close's defaults, widened to :data:`NOISE_EPS` epsilons of the coarser dtype: of each
    value (rtol) and of ``largest``, the reference tensor's largest magnitude (atol)."""
    rtol, atol = default_tolerances(*dtype_names)
    found = coarsest(*dtype_names)
    if found is None:
        return rtol, atol
    noise = NOISE_EPS * found[1]
    return max(rtol, noise), max(atol, noise * largest)


def noise_words(*dtype_names: str) -> str:
    """How compare_modules' default tolerance reads, for these dtypes."""
    found = coarsest(*dtype_names)
    whose = f"{found[0]}'s epsilon ({found[1]:g})" if found else "the epsilon of the outputs' dtype"
    return (
        f"the dtype's noise: {NOISE_EPS}x {whose} of each value or of the tensor's largest"
        " (at least torch.testing's defaults)"
    )


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

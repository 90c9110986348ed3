"""Element-wise judgement of two values, the way torch.testing.assert_close judges (torch).

Both sides are compared on the CPU in float64 (complex128 for complex, int64 for integers and
booleans), which holds every value of the narrower dtypes exactly.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from rankscope.numerics.report import LeafDiff
from rankscope.numerics.tolerance import default_tolerances, noise_tolerances
from rankscope.numerics.tree import flatten

#: Python numbers are judged as assert_close judges them: as these dtypes, with their tolerances.
_NUMBER_DTYPES = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype")


def _name(torch: Any, value: Any) -> str:
    if isinstance(value, torch.Tensor) or _is_numpy(value):
        return str(value.dtype).replace("torch.", "")
    return _NUMBER_DTYPES.get(type(value), type(value).__name__)


def _as_tensor(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if _is_numpy(value):  # an array or a NumPy scalar, as assert_close takes them
        try:
            return torch.as_tensor(value)
        except (TypeError, RuntimeError, ValueError):  # an object array, strings
            return None
    dtype = _NUMBER_DTYPES.get(type(value))
    if dtype is None:
        return None
    try:
        return torch.tensor(value, dtype=getattr(torch, dtype))
    except (OverflowError, RuntimeError, ValueError):  # an int beyond int64: compared as a plain value
        return None


def _wide(torch: Any, tensor: Any) -> Any:
    if tensor.is_complex():
        return tensor.to(torch.complex128)
    if tensor.is_floating_point():
        return tensor.to(torch.float64)
    return tensor.to(torch.int64)


def _number(value: Any) -> Optional[float]:
    number = value.item()
    return float(abs(number)) if isinstance(number, complex) else float(number)


def _equal(reference: Any, other: Any) -> bool:
    """``==`` for plain values; one whose ``==`` is not a plain truth value is not equal."""
    try:
        return bool(reference == other)
    except Exception:
        return False


def _problem(path: str, names: tuple[str, str], problem: str, total: int) -> LeafDiff:
    """Leaves that cannot be compared element-wise: every element counts as mismatched."""
    return LeafDiff(path, (), names, 0.0, 0.0, total, total, math.inf, math.inf, problem=problem)


def diff_leaf(
    torch: Any,
    path: str,
    reference: Any,
    other: Any,
    tolerances: Optional[tuple[float, float]],
    equal_nan: bool = False,
    noise: bool = False,
) -> LeafDiff:
    """How far ``other`` is from ``reference`` (tolerances: the caller's, or the dtypes' defaults;
    with ``noise``, those defaults widened to the coarser dtype's rounding noise)."""
    names = (_name(torch, reference), _name(torch, other))
    ref, oth = _as_tensor(torch, reference), _as_tensor(torch, other)
    if ref is None or oth is None:
        if type(reference) is type(other) and _equal(reference, other):
            return LeafDiff(path, (), names, 0.0, 0.0, 0, 1, 0.0, 0.0)
        return _problem(path, names, f"{reference!r} vs {other!r}", 1)
    if ref.shape != oth.shape:
        problem = f"shape {tuple(ref.shape)} vs {tuple(oth.shape)}"
        return _problem(path, names, problem, max(ref.numel(), oth.numel(), 1))
    rtol, atol = tolerances if tolerances is not None else default_tolerances(*names)
    if ref.is_complex() != oth.is_complex() or ref.dtype.is_floating_point != oth.dtype.is_floating_point:
        common = torch.promote_types(ref.dtype, oth.dtype)
        ref, oth = ref.to(common), oth.to(common)
    ref, oth = _wide(torch, ref), _wide(torch, oth)
    if tolerances is None and noise and ref.is_floating_point() and ref.numel():
        finite = ref[torch.isfinite(ref)]
        rtol, atol = noise_tolerances(names, float(finite.abs().max()) if finite.numel() else 0.0)
    if ref.is_floating_point() or ref.is_complex():
        close = torch.isclose(oth, ref, rtol=rtol, atol=atol, equal_nan=equal_nan)
        abs_diff = (oth - ref).abs().to(torch.float64)
        undefined = torch.isnan(abs_diff)
        abs_diff = torch.where(undefined, torch.where(close, 0.0, math.inf), abs_diff)
    else:  # integers and booleans: exact by default; the caller's tolerances apply, as in assert_close
        close = torch.isclose(oth, ref, rtol=rtol, atol=atol)
        abs_diff = (oth - ref).abs().to(torch.float64)
    scale = ref.abs().to(torch.float64)
    rel_diff = torch.where(abs_diff == 0, 0.0, abs_diff / scale)
    rel_diff = torch.where(torch.isnan(rel_diff), math.inf, rel_diff)  # a NaN reference: infinitely far
    total = ref.numel()
    mismatched = int(total - int(close.sum()))
    if total == 0:
        return LeafDiff(path, tuple(ref.shape), names, rtol, atol, 0, 0, 0.0, 0.0)
    flat_worst = int(abs_diff.reshape(-1).argmax())
    flat_rel = int(rel_diff.reshape(-1).argmax())
    shape = tuple(ref.shape)
    worst = _unravel(flat_worst, shape)
    return LeafDiff(
        path=path,
        shape=shape,
        dtypes=names,
        rtol=rtol,
        atol=atol,
        mismatched=mismatched,
        total=total,
        max_abs_diff=float(abs_diff.reshape(-1)[flat_worst]),
        max_rel_diff=float(rel_diff.reshape(-1)[flat_rel]),
        worst_index=worst,
        worst_values=(_number(ref.reshape(-1)[flat_worst]), _number(oth.reshape(-1)[flat_worst])),
        rel_worst_index=_unravel(flat_rel, shape),
    )


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def diff_trees(
    torch: Any, reference: Any, other: Any, tolerances: Optional[tuple[float, float]], **options: bool
) -> list[LeafDiff]:
    """Leaf by leaf (``options``: :func:`diff_leaf`'s equal_nan and noise); a leaf on one side only is
    a mismatch with its path."""
    ref_leaves, other_leaves = dict(flatten(reference)), dict(flatten(other))
    diffs = []
    for path, value in ref_leaves.items():
        if path in other_leaves:
            diffs.append(diff_leaf(torch, path, value, other_leaves[path], tolerances, **options))
        else:
            diffs.append(_problem(path, (_name(torch, value), "-"), "only on the reference side", 1))
    for path, value in other_leaves.items():
        if path not in ref_leaves:
            diffs.append(_problem(path, ("-", _name(torch, value)), "only on the other side", 1))
    return diffs

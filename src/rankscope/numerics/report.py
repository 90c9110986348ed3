"""What a comparison found: frozen records the caller prints, asserts on, or dumps as JSON (pure).

``str()`` of each is its text rendering (render.py); ``rankscope.serial.to_json`` its JSON form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Optional


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a device, and the dtype floating inputs are cast to (None: as given)."""

    device: str
    dtype: Optional[str] = None

    @property
    def label(self) -> str:
        return f"{self.device} {self.dtype}" if self.dtype else self.device


@dataclass(frozen=True)
class LeafDiff:
    """One output leaf (a tensor, or a plain value) of both sides, element by element.

    ``worst_index`` is where the absolute difference is greatest (a NaN against a number counts
    as infinitely far), ``worst_values`` the reference's and the other side's value there.
    ``problem`` is set when the leaves cannot be compared element-wise (shapes, types, a leaf on one
    side only); every element then counts as mismatched.
    """

    path: str
    shape: tuple[int, ...]
    dtypes: tuple[str, str]
    rtol: float
    atol: float
    mismatched: int
    total: int
    max_abs_diff: float
    max_rel_diff: float
    worst_index: tuple[int, ...] = ()
    worst_values: tuple[Optional[float], Optional[float]] = (None, None)
    rel_worst_index: tuple[int, ...] = ()
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.mismatched == 0 and not self.problem


@dataclass(frozen=True)
class Comparison:
    """The judgement over every leaf; the aggregate fields are those of the worst leaf.

    ``ok`` when no element of any leaf is outside its tolerance and the structures match.
    """

    reference: Side
    other: Side
    leaves: tuple[LeafDiff, ...]
    mismatched: int
    total: int
    max_abs_diff: float
    max_rel_diff: float
    worst_path: str
    worst_index: tuple[int, ...]
    worst_values: tuple[Optional[float], Optional[float]]
    ok: bool

    def __str__(self) -> str:
        from rankscope.numerics.render import render_comparison

        return render_comparison(self)


def _rank(value: float) -> float:
    return math.inf if math.isnan(value) else value


def summarise(reference: Side, other: Side, leaves: Sequence[LeafDiff]) -> Comparison:
    """A :class:`Comparison` from its leaves (the worst leaf: greatest absolute difference)."""
    worst = max(leaves, key=lambda leaf: (not leaf.ok, _rank(leaf.max_abs_diff)), default=None)
    return Comparison(
        reference=reference,
        other=other,
        leaves=tuple(leaves),
        mismatched=sum(leaf.mismatched for leaf in leaves),
        total=sum(leaf.total for leaf in leaves),
        max_abs_diff=max((leaf.max_abs_diff for leaf in leaves), key=_rank, default=0.0),
        max_rel_diff=max((leaf.max_rel_diff for leaf in leaves), key=_rank, default=0.0),
        worst_path=worst.path if worst else "",
        worst_index=worst.worst_index if worst else (),
        worst_values=worst.worst_values if worst else (None, None),
        ok=all(leaf.ok for leaf in leaves),
    )


@dataclass(frozen=True)
class TensorDiff:
    """A named parameter or buffer of both sides right after construction."""

    name: str
    diff: LeafDiff


@dataclass(frozen=True)
class ModuleRow:
    """One call of one module in call order (a module called twice has two rows: ``name#2``).

    ``inputs_ok`` is None when the call had no tensor input to compare. ``starts_here``: its
    inputs agree, its output does not, and no module it calls is in the same case: the divergence
    starts in this module's own code (or its own parameters and buffers).
    """

    name: str
    type: str
    depth: int
    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    ok: bool
    inputs_ok: Optional[bool]
    starts_here: bool = False


@dataclass(frozen=True)
class ModuleComparison:
    """compare_modules' judgement.

    ``first_divergent``: the first module, in the order outputs were produced, whose output is
    outside tolerance (``""`` is the model itself); ``first_introduced``: the first whose inputs
    agree but output does not. ``rows`` are in call order (a parent before its children).
    """

    SCHEMA: ClassVar[str] = "rankscope.numerics.compare/1"

    reference: Side
    other: Side
    rtol: Optional[float]
    atol: Optional[float]
    param_mismatches: tuple[TensorDiff, ...]
    buffer_mismatches: tuple[TensorDiff, ...]
    params_compared: int
    buffers_compared: int
    copied: tuple[str, ...]
    rows: tuple[ModuleRow, ...]
    first_divergent: Optional[str]
    first_introduced: Optional[str]
    output: Comparison
    ok: bool
    notes: tuple[str, ...] = ()
    #: how the default tolerance of the module outputs reads (None: the caller's tolerances)
    tolerance_words: Optional[str] = None

    def __str__(self) -> str:
        from rankscope.numerics.render import render_modules

        return render_modules(self)


@dataclass(frozen=True)
class TensorStats:
    """abs min / abs max of the finite elements of some tensors, and how many are inf or NaN."""

    count: int
    abs_min: Optional[float]
    abs_max: Optional[float]
    nonfinite: int


@dataclass(frozen=True)
class ModuleStep:
    """One module call the anomaly detector watched: forward, or its backward (gradients)."""

    name: str
    type: str
    phase: str
    inputs: TensorStats
    params: TensorStats
    outputs: TensorStats


@dataclass(frozen=True)
class Anomaly:
    """The first module whose output (forward) or input gradient (backward) holds inf or NaN.

    ``history`` holds the module calls just before it and itself, last (oldest first; backward
    calls in backward order). ``pass_index`` is the model's forward pass it appeared in (1-based;
    for backward, the pass whose gradients were computed). ``entered`` is True when the module's
    own inputs already held inf/NaN: it did not produce them, they came in (the model's input,
    or a tensor that no watched module returned); an input sharing memory with the module's output
    (changed in place by it) does not count.
    """

    name: str
    type: str
    phase: str
    kind: str
    pass_index: int
    entered: bool
    history: tuple[ModuleStep, ...]

    def __str__(self) -> str:
        from rankscope.numerics.render import render_anomaly

        return render_anomaly(self)

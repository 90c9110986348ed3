"""``compare``: one function run on two devices and/or two dtypes, judged like assert_close (torch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from rankscope.numerics.devices import DeviceArg, make_sides, move, on_side
from rankscope.numerics.diff import diff_trees
from rankscope.numerics.report import Comparison, Side, summarise
from rankscope.numerics.tolerance import resolve
from rankscope.numerics.torchload import load_torch
from rankscope.numerics.tree import tree_map


def run_on(torch: Any, fn: Callable[..., Any], inputs: Sequence[Any], side: Side, seed: int) -> Any:
    """``fn(*inputs)`` on ``side``, its tensors detached and brought to the CPU."""
    moved = move(torch, tuple(inputs), side)
    with on_side(torch, side, seed):
        result = fn(*moved)
    return tree_map(lambda leaf: leaf.detach().cpu() if isinstance(leaf, torch.Tensor) else leaf, result)


def compare(
    fn: Callable[..., Any],
    *inputs: Any,
    devices: DeviceArg = None,
    dtypes: Optional[Sequence[Any]] = None,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    equal_nan: bool = False,
    seed: int = 0,
) -> Comparison:
    """Run ``fn(*inputs)`` on two sides and compare the results leaf by leaf.

    ``devices``: two devices (``("cpu", "cuda")``, the default without ``dtypes``), or one with two
    ``dtypes`` (``devices="cpu", dtypes=(torch.float32, torch.float64)``; the device defaults to
    ``"cpu"`` when ``dtypes`` are given). The first side is the reference. Tensor inputs are moved
    to each side's device and floating ones cast to its dtype; ``fn`` runs with that device and
    dtype as torch's defaults (so ``torch.arange(10) / 10`` inside it follows the side) and the
    RNGs seeded with ``seed``. ``rtol``/``atol``: both or neither (torch.testing's defaults for the
    lower precision of the two); ``rtol=0, atol=0`` asks for equal values.

    A device that does not exist here raises :class:`~rankscope.numerics.devices.DeviceUnavailableError`
    naming the ones that do.
    """
    torch = load_torch()
    tolerances = resolve(rtol, atol)
    reference, other = make_sides(torch, devices, dtypes)
    expected = run_on(torch, fn, inputs, reference, seed)
    actual = run_on(torch, fn, inputs, other, seed)
    return summarise(reference, other, diff_trees(torch, expected, actual, tolerances, equal_nan=equal_nan))

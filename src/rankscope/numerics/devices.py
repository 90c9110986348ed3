"""Which devices exist here, the two sides of a comparison, and running code on one side (torch).

A side runs under ``torch.device(side.device)`` and, for a floating dtype, with that default
dtype, so tensors the function or model creates itself (``torch.arange``, a buffer computed in
``__init__``) land on that side's device and dtype, as the inputs do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

from rankscope.errors import ExitCode, RankscopeError
from rankscope.numerics.report import Side
from rankscope.numerics.tree import tree_map

DeviceArg = Union[str, Any, Sequence[Union[str, Any]], None]


class DeviceUnavailableError(RankscopeError, ValueError):
    """A device named for a comparison does not exist here (a ValueError too, for API callers)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message, hint, ExitCode.BAD_INPUT)


def available_devices(torch: Any) -> list[str]:
    """Devices this torch can compute on here: ``cpu``, ``cuda:N``, ``mps``, ``xpu:N``."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found += [f"xpu:{index}" for index in range(xpu.device_count())]
    return found


def _why_missing(torch: Any, device: Any) -> Optional[str]:
    """None when ``device`` can be used, else why not."""
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return f"this torch ({torch.__version__}) is built without CUDA"
        if not torch.cuda.is_available():
            return "torch sees no CUDA device (driver, CUDA_VISIBLE_DEVICES)"
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            return f"there are {count} CUDA devices (cuda:0 to cuda:{count - 1})"
        return None
    try:
        torch.empty(1, device=device)
    except Exception as exc:  # any backend's own refusal
        return f"torch cannot allocate on it ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return None


def check_device(torch: Any, name: Any) -> str:
    """``name`` as torch spells it, or :class:`DeviceUnavailableError` naming the devices here."""
    here = available_devices(torch)
    hint = f"devices here: {', '.join(here)}" + (
        "; on one device compare two precisions instead: devices='cpu', dtypes=(torch.float32, torch.float64)"
        if len(here) == 1
        else ""
    )
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise DeviceUnavailableError(f"{name!r} is not a device torch knows ({exc})", hint) from None
    reason = _why_missing(torch, device)
    if reason:
        raise DeviceUnavailableError(f"device {str(device)!r} is not available: {reason}", hint)
    return str(device)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def make_sides(torch: Any, devices: DeviceArg, dtypes: Optional[Sequence[Any]]) -> tuple[Side, Side]:
    """The reference side (first) and the other, checked against what exists here.

    ``devices=None`` means ``("cpu", "cuda")`` without ``dtypes`` and ``"cpu"`` with them.
    """
    if devices is None:
        devices = "cpu" if dtypes is not None else ("cpu", "cuda")
    device_list = (
        [devices] if isinstance(devices, str) or not isinstance(devices, Sequence) else list(devices)
    )
    dtype_list = [None] if dtypes is None else list(dtypes)
    if not 1 <= len(device_list) <= 2 or not 1 <= len(dtype_list) <= 2:
        raise ValueError("devices and dtypes each name one or two: the reference side first")
    if len(device_list) == 1 and len(dtype_list) == 1:
        raise ValueError(
            "nothing to compare: name two devices (devices=('cpu', 'cuda')) or two dtypes "
            "(dtypes=(torch.float32, torch.float64))"
        )
    for dtype in dtype_list:
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise ValueError(f"{dtype!r} is not a torch dtype (torch.float32, torch.bfloat16, ...)")
    checked = [check_device(torch, device) for device in device_list]
    pairs = [(checked[min(i, len(checked) - 1)], dtype_list[min(i, len(dtype_list) - 1)]) for i in range(2)]
    reference, other = (
        Side(device, _dtype_name(dtype) if dtype is not None else None) for device, dtype in pairs
    )
    if reference == other:
        raise ValueError(f"both sides are {reference.label}: nothing to compare")
    return reference, other


def dtype_of(torch: Any, side: Side) -> Any:
    return getattr(torch, side.dtype) if side.dtype else None


def move(torch: Any, value: Any, side: Side) -> Any:
    """``value``'s tensors on the side's device; floating ones in its dtype (when it has one)."""
    dtype = dtype_of(torch, side)

    def one(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        leaf = leaf.detach()
        if dtype is not None and (
            (leaf.is_floating_point() and dtype.is_floating_point) or (leaf.is_complex() and dtype.is_complex)
        ):
            return leaf.to(device=side.device, dtype=dtype)
        return leaf.to(device=side.device)

    return tree_map(one, value)


@contextlib.contextmanager
def on_side(torch: Any, side: Side, seed: int) -> Iterator[None]:
    """Run the body on ``side``: default device and (floating) default dtype, the RNGs seeded; the
    caller's RNG states are put back afterwards (a comparison inside a training loop leaves its
    random stream where it was)."""
    with _caller_rng_kept(torch, torch.device(side.device)):
        torch.manual_seed(seed)
        with _as_default(torch, side):
            yield


def _caller_rng_kept(torch: Any, device: Any) -> Any:
    """``fork_rng`` over the CPU and the accelerators whose state ``manual_seed`` changes."""
    if device.type == "cuda" or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return torch.random.fork_rng(devices=list(range(torch.cuda.device_count())))
    if device.type != "cpu":
        index = device.index if device.index is not None else 0
        return torch.random.fork_rng(devices=[index], device_type=device.type)
    return torch.random.fork_rng(devices=[])


@contextlib.contextmanager
def _as_default(torch: Any, side: Side) -> Iterator[None]:
    dtype = dtype_of(torch, side)
    previous = torch.get_default_dtype()
    with torch.device(side.device):
        if dtype is not None and dtype.is_floating_point:
            torch.set_default_dtype(dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)

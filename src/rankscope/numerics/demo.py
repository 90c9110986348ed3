"""``rankscope numerics demo``: the comparisons on whatever devices exist here (torch).

On a CPU-only machine: float32 against float64 on the CPU. With CUDA: the CPU against the GPU
(float32 both) as well. The cases: the element-wise ``10 ** (arange(0, 10) / 10)``, at the default
tolerance and exactly, and a small pre-norm transformer block, layer by layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

from rankscope.numerics.compare import compare
from rankscope.numerics.devices import available_devices
from rankscope.numerics.modules import compare_modules
from rankscope.numerics.report import Comparison, ModuleComparison
from rankscope.numerics.torchload import load_torch
from rankscope.serial import OMIT_NONE


@dataclass(frozen=True)
class DemoCase:
    """One comparison of the demo; ``judged`` cases (default tolerances) decide the exit code,
    exact ones show how many values differ at all."""

    title: str
    judged: bool
    ok: bool
    comparison: Optional[Comparison] = field(default=None, metadata=OMIT_NONE)
    modules: Optional[ModuleComparison] = field(default=None, metadata=OMIT_NONE)

    def __str__(self) -> str:
        return str(self.modules if self.modules is not None else self.comparison)


def _case(title: str, judged: bool, result: Union[Comparison, ModuleComparison]) -> DemoCase:
    if isinstance(result, ModuleComparison):
        return DemoCase(title, judged, result.ok, modules=result)
    return DemoCase(title, judged, result.ok, comparison=result)


@dataclass(frozen=True)
class NumericsDemo:
    """``ok`` when every judged case is within tolerance."""

    SCHEMA: ClassVar[str] = "rankscope.numerics.demo/1"

    torch: str
    devices: tuple[str, ...]
    ok: bool
    cases: tuple[DemoCase, ...]


def powers_of_ten() -> Any:
    """The classic example: ten powers of 10 ** 0.1, computed in the side's default dtype and device."""
    torch = load_torch()
    return 10 ** (torch.arange(0, 10) / 10)


def transformer_block(dim: int = 32, heads: int = 4) -> Callable[[], Any]:
    """A factory of a small pre-norm transformer block (attention and MLP, no fused fast path)."""
    torch = load_torch()
    nn = torch.nn
    module: Any = nn.Module

    class Attention(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x: Any) -> Any:
            batch, length, _ = x.shape
            q, k, v = self.qkv(x).view(batch, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(out.transpose(1, 2).reshape(batch, length, dim))

    class Block(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    return Block


def run_demo() -> NumericsDemo:
    torch = load_torch()
    devices = tuple(available_devices(torch))
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    f32, f64 = torch.float32, torch.float64
    cases = [
        _case(
            "10 ** (arange(0, 10) / 10), float32 vs float64", True, compare(powers_of_ten, dtypes=(f32, f64))
        ),
        _case(
            "10 ** (arange(0, 10) / 10), float32 vs float64, exact",
            False,
            compare(powers_of_ten, dtypes=(f32, f64), rtol=0, atol=0),
        ),
        _case(
            "transformer block, float32 vs float64",
            True,
            compare_modules(transformer_block(), x, dtypes=(f32, f64)),
        ),
    ]
    gpu = next((device for device in devices if device != "cpu"), None)
    if gpu is not None:
        pair = ("cpu", gpu)
        cases += [
            _case(f"10 ** (arange(0, 10) / 10), cpu vs {gpu}", True, compare(powers_of_ten, devices=pair)),
            _case(
                f"10 ** (arange(0, 10) / 10), cpu vs {gpu}, exact",
                False,
                compare(powers_of_ten, devices=pair, rtol=0, atol=0),
            ),
            _case(
                f"transformer block, cpu vs {gpu}",
                True,
                compare_modules(transformer_block(), x, devices=pair),
            ),
        ]
    ok = all(case.ok for case in cases if case.judged)
    return NumericsDemo(str(torch.__version__), devices, ok, tuple(cases))

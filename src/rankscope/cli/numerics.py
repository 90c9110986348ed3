"""`rankscope numerics`: the same computation on two devices or dtypes (the library is rankscope.numerics)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import click

from rankscope.cli.params import from_params
from rankscope.errors import ExitCode
from rankscope.serial import dump_document, to_json

HELP = """Compare numerics across devices and dtypes. The library does the work inside your code:

\b
  from rankscope.numerics import compare, compare_modules, detect_anomalies
  compare(fn, x, devices=("cpu", "cuda"))                 # one function, element by element
  compare_modules(make_model, x, dtypes=(torch.float32, torch.float64))  # first diverging layer
  with detect_anomalies(model): loss.backward()           # first module producing inf/NaN

\b
Examples:
  rankscope numerics demo            # float32 vs float64 here; CPU vs CUDA where a GPU exists
  rankscope numerics demo --json

See docs/numerics.md.
"""

DEMO_HELP = """Show a device and dtype comparison on the devices this machine has: 10 ** (arange(0, 10) / 10)
element by element (at torch.testing's default tolerance, then exactly) and a small transformer block
layer by layer. CPU only: float32 against float64. With a GPU: the CPU against it as well.

\b
Exit code: 0 when every comparison at the default tolerance agrees, 20 when one does not
(exact comparisons only inform), 6 when torch is not installed.

\b
Examples:
  rankscope numerics demo
  rankscope numerics demo --json | jq '.cases[] | {title, ok}'
"""


@dataclass(frozen=True)
class DemoRequest:
    as_json: bool = False


def finite_json(value: Any) -> Any:
    """JSON without NaN/Infinity tokens (jq and strict parsers refuse them): "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return [finite_json(item) for item in value]
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    return value


@click.group(help=HELP)
def numerics() -> None:
    pass


@numerics.command(help=DEMO_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.numerics.demo document.")
def demo(**params: Any) -> int:
    from rankscope.numerics.demo import SCHEMA, run_demo

    request = from_params(DemoRequest, params)
    result = run_demo()
    if request.as_json:
        click.echo(json.dumps(finite_json(to_json(dump_document(SCHEMA, result))), indent=2))
    else:
        click.echo(f"torch {result.torch}; devices here: {', '.join(result.devices)}")
        for case in result.cases:
            click.echo(f"\n== {case.title}{'' if case.judged else ' (informative)'}\n{case}")
    return ExitCode.OK if result.ok else ExitCode.NUMERICS_MISMATCH

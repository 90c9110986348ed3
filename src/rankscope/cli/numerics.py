"""`rankscope numerics`: the same computation on two devices or dtypes (the library is rankscope.numerics)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

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
  rankscope numerics compare models:make_model --inputs models:make_batch --devices cpu,cuda

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
    from rankscope.numerics.demo import run_demo

    request = from_params(DemoRequest, params)
    result = run_demo()
    if request.as_json:
        click.echo(json.dumps(finite_json(to_json(dump_document(result))), indent=2))
    else:
        click.echo(f"torch {result.torch}; devices here: {', '.join(result.devices)}")
        for case in result.cases:
            click.echo(f"\n== {case.title}{'' if case.judged else ' (informative)'}\n{case}")
    return ExitCode.OK if result.ok else ExitCode.NUMERICS_MISMATCH


COMPARE_HELP = """Build your model on two sides (two devices, two dtypes, or both) from your own
factory, compare its parameters and buffers right after construction, then every module's output,
and name the first layer whose error grows beyond the dtype's noise (compare_modules).

MODEL is MODULE:FACTORY: a module name (imported from the current directory first, as python -m
does) or a path to a .py file, and a function in it that takes no arguments and returns the
model. --inputs names the function that returns its inputs (a tuple: several positional inputs);
without it the model is called with none. The first device and dtype are the reference side.

\b
Examples:
  rankscope numerics compare models:make_model --inputs models:make_batch --devices cpu,cuda
  rankscope numerics compare models.py:make_model --inputs models.py:make_batch --dtypes float32,bfloat16
  rankscope numerics compare pkg.net:tiny --inputs pkg.net:batch --devices cuda:0,cuda:1 --rtol 0 --atol 0
  rankscope numerics compare models:make_model --inputs models:make_batch --dtypes float32,float64 --json

\b
Without --devices and --dtypes the sides are cpu and cuda; with only --dtypes, cpu.
Exit code: 0 when every module agrees, 20 when one diverges (the report names the first), 8 when
MODULE:FACTORY cannot be loaded, a factory or one side's model raises (one line naming the side
and the module), or a device does not exist here; 6 when torch is not installed; 2 for a bad
option (an unknown dtype, one of --rtol/--atol alone).
"""


def _names(text: Optional[str]) -> Optional[tuple[str, ...]]:
    if text is None:
        return None
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not 1 <= len(names) <= 2:
        raise click.BadParameter(f"{text!r}: one or two names, comma-separated, the reference first")
    return names


def _spec(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Any:
    from rankscope.numerics.factory import parse_spec

    if value is None:
        return None
    try:
        return parse_spec(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@dataclass(frozen=True)
class CompareRequest:
    model: Any
    inputs: Any = None
    devices: Optional[str] = None
    dtypes: Optional[str] = None
    rtol: Optional[float] = None
    atol: Optional[float] = None
    seed: int = 0
    train: bool = False
    as_json: bool = False


@numerics.command("compare", help=COMPARE_HELP)
@click.argument("model", metavar="MODULE:FACTORY", callback=_spec)
@click.option(
    "--inputs", metavar="MODULE:FACTORY", callback=_spec, help="The function that returns the inputs."
)
@click.option("--devices", metavar="DEV[,DEV]", help="cpu, cuda, cuda:1, mps... (the reference first).")
@click.option(
    "--dtypes", metavar="DTYPE[,DTYPE]", help="float32, bfloat16, float16, float64 (the reference first)."
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0),
    metavar="RTOL",
    help="Relative tolerance (with --atol; 0 and 0: exact).",
)
@click.option(
    "--atol", type=click.FloatRange(min=0), metavar="ATOL", help="Absolute tolerance (with --rtol)."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, metavar="N", help="torch.manual_seed before each build."
)
@click.option("--train", is_flag=True, help="Run the models in train mode (dropout on), not eval().")
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.numerics.compare/1 document.")
def compare_cmd(**params: Any) -> int:
    from rankscope.errors import RankscopeError
    from rankscope.numerics import DeviceUnavailableError, compare_modules
    from rankscope.numerics.factory import call_inputs, load_factory
    from rankscope.numerics.tolerance import resolve as resolve_tolerances
    from rankscope.numerics.torchload import load_torch

    request = from_params(CompareRequest, params)
    devices, dtype_names = _names(request.devices), _names(request.dtypes)
    try:
        resolve_tolerances(request.rtol, request.atol)  # a lone --rtol or --atol: before seconds of torch
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    torch = load_torch()  # before the user's module, which imports torch itself
    dtypes = None
    if dtype_names is not None:
        dtypes = tuple(getattr(torch, name, None) for name in dtype_names)
        for name, dtype in zip(dtype_names, dtypes):
            if not isinstance(dtype, torch.dtype):
                raise click.BadParameter(
                    f"{name!r} is not a torch dtype (float32, bfloat16, float16, float64)"
                )
    factory = load_factory(request.model)
    inputs = call_inputs(request.inputs) if request.inputs is not None else ()
    try:
        result = compare_modules(
            factory,
            *inputs,
            devices=devices,
            dtypes=dtypes,
            rtol=request.rtol,
            atol=request.atol,
            seed=request.seed,
            train=request.train,
        )
    except DeviceUnavailableError as exc:  # the library's hint speaks Python; this one the options
        here = exc.hint.split(";")[0]
        one = "; on one device compare two dtypes instead: --devices cpu --dtypes float32,float64"
        raise RankscopeError(
            exc.message, here + (one if ";" in exc.hint else ""), ExitCode.BAD_INPUT
        ) from None
    except RankscopeError:
        raise
    except (
        ValueError
    ) as exc:  # the sides or tolerances asked for (the model's own errors are SideRaisedError)
        raise click.UsageError(str(exc)) from None
    if request.as_json:
        click.echo(json.dumps(finite_json(to_json(dump_document(result))), indent=2))
    else:
        click.echo(str(result))
    return ExitCode.OK if result.ok else ExitCode.NUMERICS_MISMATCH

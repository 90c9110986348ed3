"""`rankscope gpu-test`: can every rank use its device and talk to every other rank? A verdict in seconds."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

import click

from rankscope.cli.params import from_params
from rankscope.errors import BadInputError, ExitCode

HELP = """Test every rank of a job: its device, the process group, a checked all_reduce and a barrier.

Run it under the launcher you use for training (torchrun, srun, mpirun, ...): each rank picks its
device by local rank, initialises the process group (nccl where CUDA is available, else gloo) with
a short timeout, all-reduces device memory, checks the sum, and prints `[host:rank] OK` with its
device, versions and CPU/NUMA affinity. Rank 0 then says which ranks failed and which never joined.
Set-up mistakes (an interface variable naming no interface, MASTER_ADDR on loopback in a multi-node
run, two ranks on one GPU) fail at once, with their fix.

\b
Examples:
  torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint n1:29500 -m rankscope gpu-test
  srun --ntasks-per-node 8 rankscope gpu-test --timeout 30   # MASTER_ADDR/PORT exported
  rankscope gpu-test --nproc 4                    # this node only: starts torchrun itself
  rankscope gpu-test --isolate                    # each GPU alone, pairs, halves: name the bad one
  rankscope gpu-test --nproc 4 --backend gloo --json
  rankscope gpu-test --isolate --devices 0,1,2,3   # no GPU: four CPU slots, one gloo rank each
"""


def _exit_for(summary: Any) -> int:
    if summary.passed:
        return int(ExitCode.OK)
    if any(r.step == "config" for r in summary.failed):
        return int(ExitCode.MISCONFIGURED)
    if summary.failed:
        return int(ExitCode.RANKS_FAILED)
    return int(ExitCode.RANKS_MISSING)


@click.command("gpu-test", help=HELP)
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    default=None,
    help="Process-group backend [default: nccl where CUDA is available, else gloo].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    metavar="SECONDS",
    default=60.0,
    show_default=True,
    help="Seconds all steps may take together, rendezvous included, counted once torch is imported.",
)
@click.option(
    "--nproc",
    type=click.IntRange(1, 256),
    metavar="N",
    default=None,
    help="Start this many ranks on this node with torchrun (the one-node case).",
)
@click.option(
    "--devices",
    default=None,
    metavar="LIST",
    help="Devices to use, e.g. 0,1,2,3 (CUDA_VISIBLE_DEVICES; on CPU: that many ranks, one per slot).",
)
@click.option(
    "--isolate", is_flag=True, help="Test each device alone, then pairs, then halves; name the bad one."
)
@click.option("--json", "json", is_flag=True, help="Print rank 0's summary as a rankscope.gputest document.")
def gpu_test(**params: Any) -> int:
    from rankscope.gputest.rank import GpuTestOptions

    options = from_params(GpuTestOptions, params)
    devices = _parse_devices(options.devices)
    if options.isolate:
        return _isolate(options, devices)
    if options.nproc is not None or devices is not None:
        return _launch(options, devices)
    return _in_rank(options)


def _parse_devices(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        devices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadInputError(
            f"--devices {text!r} is not a list of device numbers", "e.g. --devices 0,1,2,3"
        ) from None
    if not devices or len(set(devices)) != len(devices) or min(devices) < 0:
        raise BadInputError(f"--devices {text!r} must list distinct device numbers", "e.g. --devices 0,1,2,3")
    return devices


def _stop_on_misconfiguration() -> None:
    """The launcher's own pre-flight: the ranks would inherit the same mistake."""
    from rankscope.errors import RankscopeError
    from rankscope.gputest.rank import preflight

    problems = preflight(os.environ, "")
    if problems:
        raise RankscopeError(problems[0].what, problems[0].fix, ExitCode.MISCONFIGURED)


def _gpu_count() -> int:
    from rankscope.gputest.rank import require_torch

    torch = require_torch()
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _launch(options: Any, devices: Optional[list[int]]) -> int:
    from rankscope.gputest.launch import run_local, subset_env
    from rankscope.gputest.rank import gpus_present, torch_installed
    from rankscope.serial import dump_document

    _stop_on_misconfiguration()
    torch_installed()
    nproc = options.nproc or (len(devices) if devices else 1)
    if devices is not None and len(devices) != nproc:
        raise BadInputError(f"--nproc {nproc} and --devices {options.devices} disagree", "give one of them")
    env = dict(os.environ)
    if devices is not None:
        env = subset_env(tuple(devices), gpus_present(), env)
    run = run_local(nproc, options.rank_argv(), options.timeout, env, capture=options.json)
    if run.summary is None:
        why = "timed out" if run.timed_out else f"torchrun exited with {run.returncode}"
        click.echo(f"gpu-test: FAILED — rank 0 gave no verdict ({why}); see the ranks' lines above", err=True)
        return int(ExitCode.RANKS_FAILED)
    if options.json:
        click.echo(run.output, err=True, nl=False)  # the ranks' own lines; stdout holds the document
        click.echo(json.dumps(dump_document(run.summary), indent=2))
    return _exit_for(run.summary)


def _isolate(options: Any, devices: Optional[list[int]]) -> int:
    from rankscope.gputest.isolate import describe
    from rankscope.gputest.launch import isolate
    from rankscope.gputest.rank import gpus_present, torch_installed

    _stop_on_misconfiguration()
    torch_installed()
    gpus = _gpu_count() if gpus_present() else 0  # no driver device files: CPU slots, without importing torch
    if devices is None:
        if gpus:
            devices = list(range(gpus))
        elif options.nproc:
            devices = list(range(options.nproc))
        else:
            raise BadInputError("no GPU here to isolate", "on CPU, name slots to test: --devices 0,1,2,3")
    if len(devices) < 2:
        raise BadInputError("--isolate needs at least two devices", "give --devices 0,1,...")

    def show(run: Any) -> None:
        mark = click.style("OK", fg="green") if run.passed else click.style("FAILED", fg="red")
        names = ",".join(map(str, run.devices))
        click.echo(
            f"  {run.stage:<6} devices {names:<12} {mark}" + ("" if run.passed else f"  ({run.detail})")
        )

    click.echo(
        f"gpu-test --isolate: devices {','.join(map(str, devices))} ({'GPU' if gpus else 'CPU slots'})"
    )
    result = isolate(devices, options.rank_argv(), options.timeout, gpus > 0, show)
    for line in describe(result.verdict):
        click.echo(f"gpu-test: {line}")
    return int(ExitCode.OK if result.verdict.ok else ExitCode.RANKS_FAILED)


def _in_rank(options: Any) -> int:
    from rankscope.gputest.rank import VERDICT_ENV, run_rank
    from rankscope.gputest.report import summary_lines
    from rankscope.serial import dump_document

    def show(result: Any) -> None:
        click.echo(result.line(), err=options.json)

    # c10d logs every connection retry with a C++ stack; the rank's own line says what failed.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    run = run_rank(options, on_result=show)
    code = int(ExitCode.OK) if run.result.ok else int(ExitCode.RANKS_FAILED)
    if run.result.step == "config":
        code = int(ExitCode.MISCONFIGURED)
    if run.summary is not None:
        document = dump_document(run.summary)
        verdict_path = os.environ.get(VERDICT_ENV)
        if verdict_path:
            with open(verdict_path, "w") as out:
                json.dump(document, out)
        if options.json:
            click.echo(json.dumps(document, indent=2))
        else:
            for line in summary_lines(run.summary, options.timeout):
                click.echo(line)
        code = _exit_for(run.summary)
    if os.environ.get(VERDICT_ENV):
        code = (
            0  # under `gpu-test --nproc`: the verdict file carries the outcome, torchrun need not report one
        )
    if run.hung:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # a thread is stuck inside the backend; interpreter shutdown would wait on it
    return code

"""`rankscope doctor`: one checklist of what makes distributed jobs fail or undebuggable on this node."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from rankscope.cli.params import from_params
from rankscope.doctor.checks import run_checks
from rankscope.doctor.facts import gather
from rankscope.doctor.render import render
from rankscope.doctor.report import DoctorReport
from rankscope.doctor.system import System
from rankscope.errors import ExitCode
from rankscope.serial import dump_document

HELP = """Check this node for what makes multi-node PyTorch jobs fail, hang or resist debugging:
debugging tools (py-spy, gdb, strace, pystack), ptrace permission, core dumps and where they
land, /dev/shm, the memlock limit, torch / CUDA / NCCL versions and known hanging combinations,
CUDA_VISIBLE_DEVICES, NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_IB_HCA against the real
interfaces, NVIDIA GPUs (driver, ECC errors, clocks, processes, topology), AMD GPUs and the IOMMU,
and a host name that resolves to loopback. Each line is PASS, WARN, FAIL or SKIP; WARN and FAIL
come with the exact fix. It only reads: nothing on the node is changed.

\b
Exit code: 0 when nothing FAILed (WARNs included), 10 when a check FAILed.

\b
Examples:
  rankscope doctor
  rankscope doctor --json | jq '.checks[] | select(.status != "PASS")'
  srun --ntasks-per-node=1 rankscope doctor      # every node of an allocation
  rankscope exec --hosts node[1-8] -- rankscope doctor
  python -m rankscope doctor --import-torch      # the job's interpreter; ask torch itself
"""


@dataclass(frozen=True)
class DoctorRequest:
    as_json: bool = False
    verbose: bool = False
    import_torch: bool = False


@click.command(help=HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the rankscope.doctor document.")
@click.option("--verbose", "-v", is_flag=True, help="Show every check's detail (devices, topology, limits).")
@click.option(
    "--import-torch",
    is_flag=True,
    help="Import torch (seconds) to ask it for CUDA availability, devices and its NCCL; default: read versions from its files.",
)
def doctor(**params: Any) -> int:
    request = from_params(DoctorRequest, params)
    system = System.real()
    facts = gather(system, import_torch=request.import_torch)
    report = DoctorReport(facts.hostname, run_checks(facts))
    if request.as_json:
        click.echo(json.dumps(dump_document(report), indent=2))
    else:
        click.echo(render(report, request.verbose), nl=False)
    return ExitCode.CHECK_FAILED if report.failed else ExitCode.OK

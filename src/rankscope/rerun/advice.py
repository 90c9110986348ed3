"""What a rerun warns about before it starts: doctor's rule for CUDA_LAUNCH_BLOCKING with NCCL."""

from __future__ import annotations


def sync_warnings(sync: bool, cpu: bool) -> list[str]:
    """The warnings for a rerun with ``--sync`` (and ``--cpu``), for the torch of this Python."""
    if not sync or cpu:
        return []
    from rankscope.doctor.checks import launch_blocking_hang
    from rankscope.doctor.facts import torch_from_metadata

    risk = launch_blocking_hang(torch_from_metadata())
    if risk is None:
        return []
    _, problem, fix = risk
    return [f"{problem} — {fix}"]

"""What a rerun warns about before it starts: --sync where no CUDA device is visible, and doctor's rule
for CUDA_LAUNCH_BLOCKING with NCCL."""

from __future__ import annotations

import os


def sync_warnings(sync: bool, cpu: bool) -> list[str]:
    """The warnings for a rerun with ``--sync`` (and ``--cpu``), for the torch of this Python."""
    if not sync or cpu:
        return []
    from rankscope.gputest import rank
    from rankscope.rerun.collect import no_cuda_device

    hidden = no_cuda_device(os.environ, rank.gpus_present())
    if hidden:
        return [
            f"--sync changes nothing here: no CUDA device is visible ({hidden}); CUDA_LAUNCH_BLOCKING=1"
            " only orders GPU kernel launches — rerun on a node with the GPU, or use --cpu"
        ]
    from rankscope.doctor.checks import launch_blocking_hang
    from rankscope.doctor.facts import torch_from_metadata

    risk = launch_blocking_hang(torch_from_metadata())
    if risk is None:
        return []
    _, problem, fix = risk
    return [f"{problem} — {fix}"]

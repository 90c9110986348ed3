"""Facts of a healthy node, to change one thing at a time in the checks' tests."""

from __future__ import annotations

import dataclasses
import resource
from typing import Any

from rankscope.doctor.facts import Facts, Limits, TorchInfo

GIB = 1024**3


def healthy(**changes: Any) -> Facts:
    base = Facts(
        tools={
            "py-spy": "/usr/bin/py-spy",
            "gdb": "/usr/bin/gdb",
            "strace": "/usr/bin/strace",
            "pystack": "/x/pystack",
        },
        euid=1000,
        yama_scope=0,
        cap_sys_ptrace=False,
        in_container=False,
        core_limit=Limits(resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        core_pattern="core",
        core_uses_pid=True,
        shm=(32 * GIB, 30 * GIB),
        memlock=Limits(resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        infiniband=(),
        torch=TorchInfo("2.5.1+cu124", cuda="12.4", nccl="2.21.5"),
        env={},
        interfaces=("lo", "eth0", "ib0", "docker0"),
        hostname="gpu01",
        host_addresses=["10.0.0.11"],
        amd_gpus=0,
        kfd=False,
        cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet",
    )
    return dataclasses.replace(base, **changes)

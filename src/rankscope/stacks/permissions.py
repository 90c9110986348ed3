"""Why the kernel refuses ptrace here, and the exact fix (with its security cost)."""

from __future__ import annotations

import os
from typing import Optional

from rankscope.procfs import has_cap_sys_ptrace, yama_ptrace_scope


def explain_ptrace_denied(target_uid: Optional[int] = None) -> str:
    """One sentence: why ptrace was refused and what to do about it."""
    euid = os.geteuid()
    scope = yama_ptrace_scope()
    cap = has_cap_sys_ptrace()
    reasons = []
    if euid != 0 and target_uid is not None and target_uid != euid:
        reasons.append(f"the process belongs to uid {target_uid}, you are uid {euid}")
    if scope is not None and scope >= 1 and not cap:
        meaning = {
            1: "only a parent may trace its children",
            2: "only CAP_SYS_PTRACE may trace",
            3: "nobody may trace",
        }
        reasons.append(f"kernel.yama.ptrace_scope={scope} ({meaning.get(scope, 'restricted')})")
    if euid == 0 and not cap:
        reasons.append("this root has no CAP_SYS_PTRACE (a container without --cap-add SYS_PTRACE?)")
    why = "; ".join(reasons) or f"uid {euid} without CAP_SYS_PTRACE"
    if scope == 3:
        fix = "ptrace_scope=3 can only be lowered by a reboot; ask the admin"
    elif euid != 0:
        fix = "rerun with sudo (sudo env PATH=$PATH rankscope ...) or as the process owner"
        if scope is not None and scope >= 1:
            fix += (
                ", or let users trace their own processes: sudo sysctl -w kernel.yama.ptrace_scope=0 "
                "(security: any process of a user can then read that user's other processes)"
            )
    else:
        fix = "grant CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE, or the pod's securityContext)"
    return f"{why}. Fix: {fix}"

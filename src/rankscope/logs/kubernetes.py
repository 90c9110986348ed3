"""Kubernetes' own words pasted beside a job's output (pure): pods killed for memory or evicted.

``kubectl get pods`` lists a pod ``OOMKilled`` (its container hit its memory limit) or ``Evicted``
(the kubelet ended it: its node ran short of disk or memory); ``kubectl describe pod`` says the same
in a ``Reason:`` field under the pod's ``Name:`` line (a container's ``Last State: Terminated`` or the
pod's own), with the kubelet's ``Message:`` after it. Either is the cause of a rank that died there;
the other ranks' lost peers and timeouts follow from it.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

#: ``kubectl get pods`` pasted with the logs: a pod whose container the kernel killed for memory
#: (``NAME  READY  STATUS  RESTARTS  AGE``; the pod's limit, a node's memory).
_POD_OOM = re.compile(rb"^([a-z0-9][a-z0-9.-]{0,252})\s+\d+/\d+\s+OOMKilled\s+\d+", re.M)
_POD_EVICTED = re.compile(rb"^([a-z0-9][a-z0-9.-]{0,252})\s+\d+/\d+\s+Evicted\s+\d+", re.M)
#: ``kubectl describe pod``: a ``Reason:`` field (the pod's, or a container's last state's), the
#: pod's ``Name:`` line above it, the ``Message:`` after it.
_DESCRIBED = re.compile(rb"^(\s*)Reason:\s+(OOMKilled|Evicted)\b", re.M)
_DESCRIBE_NAME = re.compile(rb"^Name:\s+([a-z0-9][a-z0-9.-]{0,252})\s*$", re.M)
_MESSAGE = re.compile(rb"\n\s*Message:\s+([^\n]+)")


def _described_pod(chunk: bytes, pos: int) -> Optional[str]:
    """The pod a ``kubectl describe pod`` field at ``pos`` belongs to: the last ``Name:`` line before
    it (within 16 KiB)."""
    names = list(_DESCRIBE_NAME.finditer(chunk, max(0, pos - 16384), pos))
    return names[-1].group(1).decode() if names else None


POD_OOM_STEP = (
    "host memory, not GPU memory: `kubectl describe pod POD` shows Last State: Terminated, Reason: "
    "OOMKilled, Exit Code: 137; raise the container's resources.limits.memory, or lower the data "
    "loader's workers and prefetch"
)
EVICTED_STEP = (
    "the kubelet evicted the pod because its node ran short of a resource (disk, memory): give the "
    "container requests and limits for it (ephemeral-storage, memory), write checkpoints and caches to "
    "a volume rather than the container's disk, and restart the job from its last checkpoint"
)


class PodEvent(NamedTuple):
    #: ``OOMKilled`` or ``Evicted``.
    reason: str
    pod: str
    #: Where in the block the line that says it starts.
    at: int
    #: The kubelet's message (an eviction's), or "".
    message: str


def pod_events(chunk: bytes) -> list[PodEvent]:
    """Every pod ``get pods`` or ``describe pod`` says was OOMKilled or evicted, in a block of lines."""
    found = [PodEvent("OOMKilled", m.group(1).decode(), m.start(), "") for m in _POD_OOM.finditer(chunk)]
    found += [PodEvent("Evicted", m.group(1).decode(), m.start(), "") for m in _POD_EVICTED.finditer(chunk)]
    for match in _DESCRIBED.finditer(chunk):
        pod = _described_pod(chunk, match.start())
        if pod is None:
            continue
        said = (
            _MESSAGE.search(chunk, match.end(), match.end() + 2048) if match.group(2) == b"Evicted" else None
        )
        message = said.group(1).decode("utf-8", "replace").strip() if said else ""
        found.append(PodEvent(match.group(2).decode(), pod, match.start(), message))
    return sorted(found, key=lambda event: event.at)

"""`gpu-test --isolate`: which subsets of this node's devices to test, and what their results mean.

The manual method sets CUDA_VISIBLE_DEVICES to each device alone, then pairs, then halves, and reads
which runs fail. Planning and reading are pure; the runs themselves are ordinary one-node gpu-tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Subset = tuple[int, ...]


def plan_stages(devices: Sequence[int]) -> list[tuple[str, list[Subset]]]:
    """Each device alone, then neighbouring pairs (0,1) (1,2) ..., then the two halves; no subset twice."""
    devices = list(devices)
    stages: list[tuple[str, list[Subset]]] = [("alone", [(d,) for d in devices])]
    seen: set[Subset] = set(stages[0][1])
    pairs = [(a, b) for a, b in zip(devices, devices[1:])]
    if len(devices) > 2:
        pairs.append((devices[-1], devices[0]))  # close the ring: every device has two partners
    stages.append(("pairs", _fresh(pairs, seen)))
    half = len(devices) // 2
    halves = [tuple(devices[:half]), tuple(devices[half:])] if len(devices) >= 4 else []
    stages.append(("halves", _fresh(halves, seen)))
    stages.append(("all", _fresh([tuple(devices)], seen)))
    return [(name, subsets) for name, subsets in stages if subsets]


def _fresh(subsets: Sequence[Subset], seen: set[Subset]) -> list[Subset]:
    fresh = []
    for subset in subsets:
        key = tuple(sorted(subset))
        if len(key) > 1 and key not in seen:
            seen.add(key)
            fresh.append(subset)
    return fresh


def skip_known_bad(subsets: Sequence[Subset], bad_devices: Sequence[int]) -> list[Subset]:
    """A subset holding a device that already fails alone tells nothing new."""
    return [s for s in subsets if not set(s) & set(bad_devices)]


@dataclass
class IsolateVerdict:
    """What the subset runs say: devices that fail alone, pairs (links) that fail though each device
    passes alone, and larger groups that fail though all their tested pairs pass."""

    bad_devices: list[int] = field(default_factory=list)
    bad_links: list[Subset] = field(default_factory=list)
    bad_groups: list[Subset] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.bad_devices or self.bad_links or self.bad_groups)


def read_results(results: Mapping[Subset, bool]) -> IsolateVerdict:
    """``results``: subset -> passed. Failures already explained by a smaller failing subset are not repeated."""
    verdict = IsolateVerdict()
    verdict.bad_devices = sorted(s[0] for s, ok in results.items() if len(s) == 1 and not ok)
    bad = set(verdict.bad_devices)
    for subset, ok in sorted(results.items(), key=lambda item: (len(item[0]), item[0])):
        if ok or len(subset) == 1 or set(subset) & bad:
            continue
        if len(subset) == 2:
            verdict.bad_links.append(subset)
        elif not any(set(link) <= set(subset) for link in verdict.bad_links):
            verdict.bad_groups.append(subset)
    return verdict


def describe(verdict: IsolateVerdict) -> list[str]:
    """One line per culprit, with what to do next."""
    if verdict.ok:
        return ["every subset passed: no device or link of this node fails the test"]
    lines = [
        f"device {d} fails on its own — take it out of service (CUDA_VISIBLE_DEVICES without it) and check"
        " `nvidia-smi -q -i {d}` (ECC, retired pages) and `dmesg` (Xid errors)".replace("{d}", str(d))
        for d in verdict.bad_devices
    ]
    lines += [
        f"devices {a} and {b} each pass alone but fail together — the link between them: check"
        " `nvidia-smi topo -m` and `nvidia-smi nvlink -s`; try NCCL_P2P_DISABLE=1 to confirm"
        for a, b in verdict.bad_links
    ]
    lines += [
        f"devices {','.join(map(str, g))} fail together though every tested pair among them passes —"
        " a shared switch or bridge: check `nvidia-smi topo -m`; try NCCL_P2P_LEVEL=PHB"
        for g in verdict.bad_groups
    ]
    return lines

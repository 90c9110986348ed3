"""The classic set-up mistakes, caught before the backend meets them: pure functions, each with its fix.

Inputs are plain data (the environment, the interface names, the addresses a name resolves to, each
rank's device slot), so the branches that need a GPU or a second node are tested with crafted input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rankscope.folding import RankSet
from rankscope.net.ifname import is_loopback, missing_interfaces
from rankscope.ranks import spans_nodes

#: Variables that name the network interface a backend binds to. NCCL also accepts a list, `^` to
#: exclude and `=` for an exact match; gloo takes a comma-separated list of names.
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


@dataclass(frozen=True)
class Problem:
    """A mistake found before the backend: what is wrong and the exact fix."""

    check: str
    what: str
    fix: str

    def one_line(self) -> str:
        return f"{self.what} — {self.fix}"


@dataclass(frozen=True)
class DeviceSlot:
    """Where a rank's device is: the host, and the device's index or (better) its UUID."""

    host: str
    rank: int
    device: str


def check_interface_variables(env: Mapping[str, str], interfaces: Sequence[str]) -> list[Problem]:
    """A *_SOCKET_IFNAME that names no interface on this node: the backend would fail or hang later."""
    problems = []
    for variable in IFNAME_VARIABLES:
        value = env.get(variable)
        if value is None or not value.strip():
            continue
        missing = missing_interfaces(variable, value, interfaces)
        if missing:
            problems.append(
                Problem(
                    "interface",
                    f"{variable}={value} names {', '.join(missing)}, which does not exist on this node"
                    f" (interfaces here: {', '.join(interfaces) or 'none'})",
                    f"set {variable} to the interface that carries the nodes' addresses"
                    " (`rankscope net ifaces` or `ip -br addr` lists them), or unset it",
                )
            )
    return problems


def check_master_address(env: Mapping[str, str], resolved: Iterable[str]) -> list[Problem]:
    """MASTER_ADDR that resolves to loopback on a multi-node run: the other nodes reach their own loopback."""
    master = env.get("MASTER_ADDR", "")
    addresses = list(resolved)
    if not master or not spans_nodes(env) or not addresses or not all(is_loopback(a) for a in addresses):
        return []
    return [
        Problem(
            "master-address",
            f"MASTER_ADDR={master} resolves to {', '.join(addresses)} (loopback) on a multi-node run:"
            " the other nodes would look for the rendezvous on themselves",
            "set MASTER_ADDR to the first node's address on the network the nodes share"
            " (e.g. `--master-addr $(hostname -I | cut -d' ' -f1)` on it, or the SLURM head node's name)",
        )
    ]


def check_hostname_address(
    env: Mapping[str, str], backend: str, hostname: str, resolved: Iterable[str]
) -> list[Problem]:
    """gloo binds to the address this node's name resolves to unless GLOO_SOCKET_IFNAME is set;
    on a multi-node run a loopback address there is advertised to the peers, which then hang."""
    addresses = list(resolved)
    if backend != "gloo" or env.get("GLOO_SOCKET_IFNAME") or not spans_nodes(env):
        return []
    if not addresses or not all(is_loopback(a) for a in addresses):
        return []
    return [
        Problem(
            "hostname-loopback",
            f"this node's name {hostname} resolves to {', '.join(addresses)} (loopback) and GLOO_SOCKET_IFNAME"
            " is not set: gloo would advertise a loopback address to the other nodes, and they would hang",
            "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface the nodes share on every node,"
            " or make the name resolve to that interface's address (/etc/hosts)",
        )
    ]


def duplicate_devices(slots: Iterable[DeviceSlot]) -> list[Problem]:
    """Two ranks on one device of one host: NCCL refuses them ("Duplicate GPU detected")."""
    by_device: dict[tuple[str, str], list[int]] = {}
    for slot in slots:
        by_device.setdefault((slot.host, slot.device), []).append(slot.rank)
    problems = []
    for (host, device), ranks in sorted(by_device.items()):
        if len(ranks) > 1:
            problems.append(
                Problem(
                    "duplicate-device",
                    f"{RankSet.of(ranks).phrase()} all use device {device} on {host}"
                    " (NCCL refuses this: 'Duplicate GPU detected')",
                    "each rank must pick its own device: torch.cuda.set_device(int(os.environ['LOCAL_RANK']));"
                    " start at most as many ranks per node as it has GPUs, and check CUDA_VISIBLE_DEVICES",
                )
            )
    return problems

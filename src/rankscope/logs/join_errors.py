"""Ranks that never arrived (pure): torch's own word, in the message of a rank that waited, on who
did not join a rendezvous, a barrier or a communicator.

The rank that waits is the one that raises, so its traceback alone would blame the one rank that
did arrive. These messages say more: how many joined, which ranks failed to pass, whose NCCL id never
came, which store could not be reached. Each is turned into one finding about the ranks that did not
arrive, which takes the place of the plain ``python_exception`` findings of the same messages (see
``rankscope.logs.c10d_errors.specific_findings``). The forms torch has printed
(``distributed_c10d.py``, ``TCPStore.cpp``, ``socket.cpp``, ``ProcessGroupGloo.cpp``,
``ProcessGroupNCCL.cpp``)::

    Timed out initializing process group in store based barrier on rank: 3, for key:
        store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)          (torch 1.x)
    ... on rank 3, for key: ... (world_size=8, num_workers_joined=4, timeout=0:30:00 error=...)   (2.x)
    Timed out after 1801 seconds waiting for clients. 2/4 clients joined.        (the store's server)
    The client socket has timed out after 600000ms while trying to connect to (10.1.0.4, 29500).
    The client socket has failed to connect to any network address of (10.1.0.4, 29500).
    [Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 30000 ms      (wait_all_ranks=True)
    [Rank 0]: Rank 2 failed to pass monitoredBarrier in 30000 ms
    [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value
        store by key '0', but store->get('0') got error: Socket Timeout      (torch < 2.2: "retreiving")

Counting: the store counts every process that reached it, the waiter included, so "1/2 clients
joined" on rank 0 means that no other rank connected. When exactly as many distinct ranks printed a
barrier timeout as joined it, the ranks that did not are the rest of the world. More joined than the
world size means that another job (or an earlier run) shares the same store. Rank numbers in the
monitored-barrier and NCCL-id messages are the process group's (the global ones in the default group).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Optional

from rankscope.evidence import CULPRIT, HANDLED, Finding, Kind
from rankscope.folding import RankSet

NEVER_JOINED = "ranks_never_joined"
STORE_UNREACHABLE = "store_unreachable"
MONITORED_BARRIER = "monitored_barrier"
NCCL_ID_WAIT = "nccl_id_wait"
CAUSES = (NEVER_JOINED, STORE_UNREACHABLE, MONITORED_BARRIER, NCCL_ID_WAIT)

#: A store wait that timed out (a key another rank was to write: a gloo peer's address when a group is
#: created, a barrier's key): read as never-arrived ranks only when torchrun's summary lists the world.
_STORE_WAIT = "store_wait"

#: What the exception line (and every other line) of these failures holds.
WORDS = (
    b"store based barrier",
    b"waiting for clients",
    b"client socket has",
    b"monitoredBarrier",
    b"ncclUniqueId",
    b"wait timeout after",
)

_BARRIER = re.compile(
    r"Timed out initializing process group in store based barrier on rank:? (\d+).*?"
    r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([^ ,)]+)"
)
_CLIENTS = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
_CONNECT = re.compile(
    r"The client socket has (?:timed out after (\S+) while trying to connect to"
    r"|failed to connect to any network address of) \(([^,()]+), (\d+)\)"
)
#: torch's warning at each failed try to reach the store (torch >= 2.0): the endpoint and the errno.
_TRIED = re.compile(
    r"The client socket has failed to connect to \[([^\]]+)\]:(\d+) \(errno: (\d+) - ([^)]+)\)"
)
_MONITORED = re.compile(r"Ranks? ([\d, ]+?) failed to pass monitoredBarrier in (\d+) ms")
_WAIT = re.compile(r"wait timeout after (\d+) ?ms, keys: (\S+)")
_NCCL_ID = re.compile(
    r"\[(\d+)\] is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from \[(\d+)\]"
)

JOIN_STEP = (
    "the ranks that never joined did not reach init_process_group in time: read their own output (the "
    "other nodes' launchers, the scheduler's log) for a crash or a slow step before it (a download, data "
    "preparation, compilation), check that every node was started, and that each reaches "
    "MASTER_ADDR:MASTER_PORT (`rankscope net probe HOST:PORT` from that node); a slow start-up needs a longer "
    "timeout= in init_process_group"
)
SHARED_STEP = (
    "give each job its own rendezvous: a free MASTER_PORT (torchrun --master-port, or its own "
    "--rdzv-id and --rdzv-endpoint), a fresh init_method file; stop what is left of an earlier run"
)
STORE_STEP = (
    "nothing answered at {endpoint} in time: the store's host (rank 0, or the launcher's agent on the "
    "--rdzv-endpoint / master node) had not started yet, had died, or listens elsewhere. Check that "
    "MASTER_ADDR and MASTER_PORT (or --rdzv-endpoint) are the same on every node and name an address this "
    "node can route to, and that no firewall drops the port (`rankscope net probe {endpoint}` from here)"
)
#: What the last failed try's errno says, in place of :data:`STORE_STEP`'s guess between them.
_TRIED_STEPS = {
    111: "{host} answered, but nothing listened on port {port} (connection refused): the store's process "
    "(rank 0, or the launcher's agent on the --rdzv-endpoint node) had not started yet, had died, or listens "
    "on another port; check that MASTER_PORT (or --rdzv-endpoint's port) is the same on every node",
    113: "there is no route from here to {host} (no route to host: a firewall that rejects, or an address "
    "of a network this node does not reach): check that MASTER_ADDR (or --rdzv-endpoint) names an address "
    "this node can route to (`ip route get ADDRESS`) and the firewall on both sides (`rankscope net probe "
    "{endpoint}` from here)",
}
_TRIED_STEPS[101] = _TRIED_STEPS[113]  # network unreachable
MONITORED_STEP = (
    "find where {ranks} instead of at {place}: `rankscope stacks` while the job hangs; if they "
    "ended, their own output (`rankscope logs errors`)"
)
NCCL_ID_STEP = (
    "{root} creates the communicator's id when it first runs a collective on that group; it never "
    "got there: find where it is (`rankscope stacks` while it hangs, its own output if it ended) and why its "
    "code path skips or delays that collective"
)


@dataclass(frozen=True)
class Join:
    """What one line says: the cause, the rank that waited, and what it counted or named."""

    cause: str
    waiter: Optional[int] = None
    world: Optional[int] = None
    joined: Optional[int] = None
    #: Ranks the message names as not arrived (monitored barrier, the NCCL id's root).
    missing: tuple[int, ...] = ()
    #: The timeout as the message writes it (``0:30:00``, ``600000ms``, ``1801 seconds``).
    waited: Optional[str] = None
    #: ``host:port`` of the store a client could not reach.
    endpoint: Optional[str] = None


def parse(text: str) -> Optional[Join]:
    """The join failure a line reports; None for any other line."""
    found = _BARRIER.search(text)
    if found is not None:
        rank, world, joined, waited = found.groups()
        return Join(NEVER_JOINED, int(rank), int(world), int(joined), waited=waited)
    found = _CLIENTS.search(text)
    if found is not None:
        seconds, joined, world = found.groups()
        return Join(NEVER_JOINED, None, int(world), int(joined), waited=f"{seconds} seconds")
    found = _CONNECT.search(text)
    if found is not None:
        waited, host, port = found.groups()
        return Join(STORE_UNREACHABLE, waited=waited, endpoint=f"{host.strip()}:{port}")
    found = _MONITORED.search(text)
    if found is not None:
        missing = tuple(int(r) for r in re.findall(r"\d+", found.group(1)))
        return Join(MONITORED_BARRIER, 0, missing=missing, waited=f"{found.group(2)} ms")
    found = _NCCL_ID.search(text)
    if found is not None:
        return Join(NCCL_ID_WAIT, int(found.group(1)), missing=(int(found.group(2)),))
    found = _WAIT.search(text)
    if found is not None:
        return Join(_STORE_WAIT, waited=f"{found.group(1)} ms", endpoint=found.group(2))
    return None


#: torchrun's agent when it could not reach the rendezvous store: its inner exception (a chained
#: ``DistNetworkError``, or the ``[c10d]`` socket warnings before it) names the endpoint.
_WRAPPED_CONNECT = re.compile(r"RendezvousConnectionError: The connection to the C10d store has failed")


def tried(text: str) -> Optional[tuple[str, int, str]]:
    """A failed try to reach the store (``host:port``, errno, its words); None for any other line."""
    found = _TRIED.search(text)
    if found is None:
        return None
    host, port, errno, words = found.groups()
    return f"{host.strip()}:{port}", int(errno), words.strip()


def classify(text: str) -> Optional[str]:
    """The cause of an exception line that is one of these failures, else None. torchrun's
    ``RendezvousConnectionError`` is ``store_unreachable`` too, though it names no endpoint: it is
    folded into the finding of the line that does, where there is one."""
    found = parse(text)
    if found is None:
        return STORE_UNREACHABLE if _WRAPPED_CONNECT.search(text) else None
    return NEVER_JOINED if found.cause == _STORE_WAIT else found.cause


@dataclass(frozen=True)
class Heard:
    """A line of one of these failures: who wrote it (its prefix, its global rank), where, and what it says."""

    who: Optional[str]
    global_rank: Optional[int]
    source: str
    line: int
    order: int
    join: Join


#: Lines kept per cause (each rank that waited prints one or two).
KEPT = 4096


class JoinLines:
    """The lines of these failures, fed one by one."""

    def __init__(self) -> None:
        self.heard: dict[str, list[Heard]] = {}
        #: The last failed try to reach each store endpoint: (errno, its words).
        self.tries: dict[str, tuple[int, str]] = {}

    def feed(self, heard: Heard) -> None:
        kept = self.heard.setdefault(heard.join.cause, [])
        if len(kept) < KEPT:
            kept.append(heard)

    def findings(self, world: Iterable[int] = ()) -> list[Finding]:
        """``world``: the ranks torchrun's failure summary lists (every rank of the job, when it is there)."""
        out = []
        waits = self.heard.get(_STORE_WAIT)
        if waits:
            found = _store_wait(sorted(waits, key=lambda h: h.order), set(world))
            if found is not None:
                out.append(found)
        for cause, build in (
            (NEVER_JOINED, _never_joined),
            (STORE_UNREACHABLE, lambda heard: _unreachable(heard, self.tries)),
            (MONITORED_BARRIER, _monitored),
            (NCCL_ID_WAIT, _nccl_id),
        ):
            if self.heard.get(cause):
                out.append(build(sorted(self.heard[cause], key=lambda h: h.order)))
        return out


def _rank_of(heard: Heard) -> Optional[int]:
    """The rank that wrote the line: its global rank, a numeric prefix, else the rank its message names."""
    if heard.global_rank is not None:
        return heard.global_rank
    if heard.who is not None and heard.who.isdigit():
        return int(heard.who)
    return heard.join.waiter


def _finding(
    kind: Kind, first: Heard, what: str, step: str, ranks: Iterable[int] = (), who: Optional[str] = None
) -> Finding:
    folded = RankSet.of(ranks)
    if who is None and len(folded.ranks) == 1:
        who = str(folded.ranks[0])
    return Finding(
        kind,
        first.join.cause,
        CULPRIT,
        who,
        what,
        None,
        first.source,
        first.line,
        first.order,
        global_rank=folded.ranks[0] if len(folded.ranks) == 1 else None,
        ranks=str(folded) if folded.ranks else None,
        next_step=step,
    )


def _never_joined(heard: list[Heard]) -> Finding:
    first = heard[0]
    world = max(h.join.world or 0 for h in heard)
    joined = max(h.join.joined or 0 for h in heard)
    waited = first.join.waited
    barrier = any(h.join.waiter is not None for h in heard)
    place = "init_process_group's store-based barrier" if barrier else "the rendezvous store (TCPStore)"
    if joined > world:
        what = (
            f"{joined} processes joined {place}, which expected {world} ranks: another job or an "
            "earlier run shares this rendezvous store"
        )
        return _finding(Kind.EXCEPTION_LINE, first, what, SHARED_STEP)
    arrived = {r for r in (_rank_of(h) for h in heard) if r is not None}
    missing: list[int] = []
    if barrier and len(arrived) == joined and all(r < world for r in arrived):
        missing = [r for r in range(world) if r not in arrived]
    elif not barrier and joined == 1 and world > 1 and all(_rank_of(h) in (None, 0) for h in heard):
        missing = list(range(1, world))  # only the store's own rank 0 was there
    absent = world - joined
    named = f": {RankSet.of(missing).phrase()}" if missing else ""
    what = (
        f"only {joined} of {world} ranks reached {place} within {waited}; {absent} never did{named}"
        if barrier
        else f"only {joined} of {world} processes connected to {place} within {waited}; {absent} never did{named}"
    )
    return _finding(Kind.EXCEPTION_LINE, first, what, JOIN_STEP, missing)


def _store_wait(heard: list[Heard], world: set[int]) -> Optional[Finding]:
    """Ranks whose store wait timed out, when torchrun's summary says who else the job had: the ranks
    that never wrote the key are the rest (none known without the summary: no finding, the waits stay
    victims' errors)."""
    waiters = {r for r in (_rank_of(h) for h in heard) if r is not None}
    missing = sorted(world - waiters)
    if not waiters or not missing or not waiters <= world:
        return None
    first = heard[0]
    them = RankSet.of(missing).phrase()
    what = (
        f"{RankSet.of(waiters).phrase()} timed out after {first.join.waited} waiting in the store for a key "
        f"{them} never wrote ({first.join.endpoint}): {them} never reached that step (a group it did not "
        "create, a barrier or collective it did not enter)"
    )
    # a pointer read from its peers' timeouts, like the NCCL id's: weaker than that rank's own error
    finding = _finding(
        Kind.WATCHDOG, first, what, MONITORED_STEP.format(ranks=_is_are(missing), place="that step"), missing
    )
    return replace(finding, cause=NEVER_JOINED)


def _is_are(ranks: list[int]) -> str:
    return f"{RankSet.of(ranks).phrase()} {'is' if len(ranks) == 1 else 'are'}"


def _unreachable(heard: list[Heard], tries: Optional[dict[str, tuple[int, str]]] = None) -> Finding:
    first = heard[0]
    endpoint = first.join.endpoint or "MASTER_ADDR:MASTER_PORT"
    ranks = sorted({r for r in (_rank_of(h) for h in heard) if r is not None})
    whos = sorted({h.who for h in heard if h.who is not None})
    waited = next((h.join.waited for h in heard if h.join.waited), None)
    how = f"timed out after {waited}" if waited else "no address of it answered"
    step = STORE_STEP.format(endpoint=endpoint)
    last = (tries or {}).get(endpoint)
    if last is not None:  # torch's warnings said how each try failed
        errno, words = last
        how += f"; its last try: errno {errno}, {words}"
        host, _, port = endpoint.rpartition(":")
        step = _TRIED_STEPS.get(errno, step).format(host=host, port=port, endpoint=endpoint)
    what = f"could not connect to the rendezvous store at {endpoint} ({how})"
    who = first.who if len(whos) == 1 else None
    # the network under a rank: weaker than any rank's death (a dead store host is the cause then)
    return _finding(Kind.NETWORK, first, what, step, ranks, who)


def _monitored(heard: list[Heard]) -> Finding:
    first = heard[0]
    missing = sorted({r for h in heard for r in h.join.missing})
    them = "it" if len(missing) == 1 else "them"
    what = f"did not reach monitored_barrier within {first.join.waited}: rank 0 waited for {them}"
    if len(missing) != 1:  # no one rank to put before it
        what = f"{RankSet.of(missing).phrase()} {what}"
    step = MONITORED_STEP.format(ranks=_is_are(missing), place="the barrier")
    return _finding(Kind.EXCEPTION_LINE, first, what, step, missing)


def _nccl_id(heard: list[Heard]) -> Finding:
    first = heard[0]
    roots = sorted({r for h in heard for r in h.join.missing})
    waiters = sorted({r for r in (h.join.waiter for h in heard) if r is not None})
    root = RankSet.of(roots).phrase()
    what = (
        f"{RankSet.of(waiters).phrase()} waited for {root} to create the NCCL communicator (its ncclUniqueId in "
        f"the store) and gave up: {root} never reached that collective"
    )
    # a pointer to the rank, read from its peers' timeouts: weaker than that rank's own death
    return _finding(Kind.WATCHDOG, first, what, NCCL_ID_STEP.format(root=root), roots)


def absorb(finding: Finding, plain: list[Finding]) -> Finding:
    """The specific finding in place of the plain findings of the same messages: the earliest one's
    place and time, the first user frame; caught everywhere (every rank wrote on), it ended nothing."""
    if not plain:
        return finding
    ordered = sorted(plain, key=lambda f: f.order)
    where = next((f.where for f in ordered if f.where), None)
    kind = finding.kind
    if kind == Kind.EXCEPTION_LINE and any(f.kind == Kind.TRACEBACK for f in plain):
        kind = Kind.TRACEBACK
    role = HANDLED if all(f.role == HANDLED for f in plain) else CULPRIT
    return replace(
        finding,
        kind=kind,
        role=role,
        where=where,
        order=min(finding.order, ordered[0].order),
        time=min((f.time for f in plain if f.time is not None), default=finding.time),
        exception=ordered[0].exception,
    )

"""The `rankscope fr` document (schema ``rankscope.fr/1``): groups, divergences, the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from rankscope.fr.ras import RasReport
from rankscope.model import SCHEMA_VERSION, Frame
from rankscope.serial import OMIT_NONE, dump_document, load_document

#: Divergence kinds, first of a group's collectives where ranks disagree.
EXTRA = "extra"  # the odd ranks issued a collective the others did not (their next one is the others' one)
SKIPPED = "skipped"  # the odd ranks skipped the others' collective (their one is the others' next)
OP = "op"  # a different collective at the same sequence number
SIZE = "size"  # same collective, different tensor sizes
DTYPE = "dtype"  # same collective, different dtypes
CALL_SITE = "call site"  # same collective and sizes, issued from different lines (silently paired)
MISSING = "missing"  # some ranks never issued a collective the others did
UNMATCHED = (
    "unmatched"  # a group the dumps name no members of: the ranks seen in it wait, nobody else issued it
)
P2P = "p2p"  # sends and receives between two ranks that do not pair up
NO_DUMP = "no dump"  # a member rank left no records at all
NOT_STARTED = (
    "not started"  # every rank issued the last collective; some started it on the GPU, the others never did
)


@dataclass
class Side:
    """Ranks that did the same thing at a divergence (or did nothing: ``op`` is "")."""

    ranks: str
    rank_list: list[int]
    op: str = ""
    seq: int = 0
    sizes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    out_sizes: list[list[int]] = field(default_factory=list)
    out_dtypes: list[str] = field(default_factory=list)
    #: Operations these ranks issued under this sequence number (several: a coalesced collective).
    operations: int = 1
    call_site: Optional[Frame] = field(default=None, metadata=OMIT_NONE)
    #: Where these ranks' stack leaves the other side's, when both reach the collective through the same
    #: call site (a shared wrapper): the line that differs.
    diverges_at: Optional[Frame] = field(default=None, metadata=OMIT_NONE)
    #: The call stack that issued it, innermost first (user frames and torch's).
    frames: list[Frame] = field(default_factory=list)
    #: The op completed on these ranks (retired); None when the ranks do not agree.
    completed: Optional[bool] = field(default=None, metadata=OMIT_NONE)
    #: For ``missing``: the last collective these ranks issued in the group.
    last_seq: Optional[int] = field(default=None, metadata=OMIT_NONE)


@dataclass
class P2PWait:
    """Ranks the live stacks show waiting in a point-to-point call (gloo records none of them)."""

    ranks: str
    rank_list: list[int]
    #: ``recv``, ``send`` or ``batch_isend_irecv``: torch.distributed's call they wait in.
    op: str
    #: The user's line that called it.
    call_site: Optional[Frame] = field(default=None, metadata=OMIT_NONE)
    #: The other rank (``src`` of recv, ``dst`` of send) where the stacks' local variables tell.
    peer: Optional[int] = field(default=None, metadata=OMIT_NONE)


@dataclass
class Divergence:
    pg: str
    pg_desc: str
    kind: str
    seq: int
    #: The ranks to look at first (the odd ones out, or those that left no records).
    suspects: list[int]
    text: str
    sides: list[Side] = field(default_factory=list)
    #: The records of a side carry no frames (JSON dumps): the cause may be an earlier call they cannot show.
    no_call_sites: bool = False
    #: Joined from live stacks: the suspects that wait in a point-to-point call (absent without stacks).
    p2p_waits: Optional[list[P2PWait]] = field(default=None, metadata=OMIT_NONE)


@dataclass
class RankProgress:
    """Where one rank is in one group: its last enqueued and completed collective (-1: none)."""

    rank: int
    last_enqueued: int
    last_completed: int
    #: The op of the last enqueued collective and who issued it.
    op: str = ""
    call_site: Optional[Frame] = field(default=None, metadata=OMIT_NONE)


@dataclass
class GroupView:
    pg: str
    desc: str
    members: str
    member_list: list[int]
    progress: list[RankProgress] = field(default_factory=list)
    #: Members that left no dump.
    absent: list[int] = field(default_factory=list)
    divergence: Optional[Divergence] = field(default=None, metadata=OMIT_NONE)


@dataclass
class RecentEntry:
    """One of the last collectives of a rank whose dump is the only one: what its recorder shows."""

    seq: int
    op: str
    group: str
    #: ``completed``, ``started`` or ``scheduled``: the entry's own state.
    state: str
    sizes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    call_site: Optional[Frame] = field(default=None, metadata=OMIT_NONE)
    duration_ms: Optional[float] = field(default=None, metadata=OMIT_NONE)
    discovered_ms: Optional[float] = field(default=None, metadata=OMIT_NONE)


@dataclass
class Refused:
    rank: int
    #: ``FILE: why``
    reason: str


@dataclass
class Unreadable:
    path: str
    reason: str


@dataclass
class FrReport:
    """The verdict over every rank's flight recorder."""

    SCHEMA: ClassVar[str] = f"rankscope.fr/{SCHEMA_VERSION}"

    headline: str
    ranks: str
    rank_list: list[int]
    #: Ranks of the job (0 .. world size - 1, as far as the dumps tell) that left no readable dump.
    absent: list[int] = field(default_factory=list)
    desync: bool = False
    #: True when every dump is empty (the recorder was not enabled, or recorded nothing yet).
    empty: bool = False
    #: With ``empty``: the recorder was on (a dump's pg_config names process groups, which torch records
    #: only when it is), so nothing had been issued yet.
    recorder_on: bool = False
    #: One dump whose rank is the whole job (every process group its pg_config names has it alone): no
    #: other rank to wait for, so a collective it never completed was held in the rank itself.
    alone: bool = False
    groups: list[GroupView] = field(default_factory=list)
    #: The first divergence of every group that has one and of every pair of ranks whose sends and
    #: receives do not pair up: the verdict's first (rankscope.fr.align.analyse orders them).
    divergences: list[Divergence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    #: Ranks whose dump was there but not read (refused as hostile, over a limit, not a regular file ...).
    refused: list[Refused] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    #: With one dump only: that rank's last collectives, oldest first (nothing to compare them with).
    recent: list[RecentEntry] = field(default_factory=list)
    #: Joined from live stacks: ranks waiting in a point-to-point call that no divergence names.
    p2p_waits: Optional[list[P2PWait]] = field(default=None, metadata=OMIT_NONE)
    #: NCCL RAS findings joined in (``--ras``), when given.
    ras: Optional[RasReport] = field(default=None, metadata=OMIT_NONE)


def report_document(report: FrReport) -> dict[str, Any]:
    return dump_document(report)


def load_report(data: Any) -> FrReport:
    return load_document(FrReport, data)

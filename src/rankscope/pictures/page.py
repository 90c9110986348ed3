"""The page model: what one HTML page shows, whatever verb's report it comes from (pure data).

A :class:`Page` is a verdict and a list of sections; each section is one kind of picture, drawn by
the page's script by its ``kind``. Adapters (``stacks_page``, ``fr_page``, ``net_page``) build it from
a verb's report, so a verb that joins several reports (``why``) builds one page of all their sections.
Everything here is plain text and numbers: the writer escapes it, the script puts it in the page
as text, never as markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass
class FlameNode:
    """One frame (or a folded run of library frames) of the merged call tree, and the ranks through it."""

    #: The function, or ``… 5 frames in torch`` for a folded run.
    name: str
    #: ``train.py:42`` (``libc.so.6`` for native code); empty for a folded run.
    where: str
    #: The ranks through this frame, folded (``0-3,5``, ``node1:[0-3]``).
    ranks: str
    count: int
    #: The full path of the source file, when it differs from ``where``.
    path: str = ""
    library: bool = False
    #: Only culprit ranks (the diagnosis's odd ones out) pass through this frame.
    culprit: bool = False
    #: The folded frames of a run, outermost first (``describe_frame`` text).
    folded: list[str] = field(default_factory=list)
    children: list[FlameNode] = field(default_factory=list)


@dataclass
class FlameSection:
    """The merged call tree of one thread role as an icicle: widths are rank counts."""

    title: str
    #: One root per thread role (the thread's name is the root frame).
    roots: list[FlameNode]
    #: The ranks of the widest root: the full width (a role on fewer ranks is drawn narrower).
    total: int
    #: Whose culprits the red frames are (``the diagnosis`` of stacks, ``the verdict`` of why).
    named_by: str = "the diagnosis"
    kind: str = "flame"


@dataclass
class GridCell:
    rank: str
    #: Index into :attr:`GridSection.groups`; -1 when the rank has no stack (its dump failed).
    group: int
    culprit: bool = False


@dataclass
class GridRow:
    node: str
    cells: list[GridCell]


@dataclass
class GridSection:
    """Nodes by ranks, each rank coloured by its stack group."""

    title: str
    #: What each group is (its innermost user frame and the ranks in it).
    groups: list[str]
    rows: list[GridRow]
    kind: str = "grid"


@dataclass
class Collective:
    seq: int
    op: str
    #: ``completed``, ``started``, ``scheduled`` (or empty).
    state: str = ""
    where: str = ""
    #: The first divergence of its group is at this collective.
    diverges: bool = False


@dataclass
class FrLane:
    """The collectives of one or more ranks (the same ones) in one group, oldest first."""

    #: ``rank 3``, ``ranks 0-2,4``.
    ranks: str
    collectives: list[Collective]
    #: Collectives of this rank in this group left out of the page, before and after those shown.
    left_out_before: int = 0
    left_out_after: int = 0
    #: What the rank's progress says when no collectives are shown (``enqueued #3, completed #2``).
    summary: str = ""


@dataclass
class FrGroup:
    name: str
    members: str
    lanes: list[FrLane]
    #: The sequence number of the group's first divergence, and its words.
    divergence_seq: int = -1
    divergence: str = ""


@dataclass
class FrSection:
    """Per process group and rank, the collectives around the first divergence."""

    title: str
    groups: list[FrGroup]
    #: What was left out, in words (``the last 50 collectives per rank around the divergence``).
    note: str = ""
    kind: str = "fr"


@dataclass
class HeatmapSection:
    """A square matrix of verdicts (``net check``: who reaches whom on a port)."""

    title: str
    rows: list[str]
    columns: list[str]
    #: ``cells[row][column]``: a verdict word, or "" when not probed.
    cells: list[list[str]]
    #: verdict word -> what it means.
    legend: dict[str, str]
    #: The verdict word that is good (drawn green); every other word is a problem.
    good: str = ""
    kind: str = "heatmap"


@dataclass
class TableSection:
    """Facts as a table (progress steps per rank, GPUs, failures)."""

    title: str
    header: list[str]
    rows: list[list[str]]
    kind: str = "table"


@dataclass
class TimelineSlice:
    """One call on a rank's timeline: from its call to its return (or to the end of the ring)."""

    name: str
    #: ``train.py:42``
    where: str
    #: microseconds since the timeline's zero
    start: float
    end: float
    #: the sub-row: the thread's first lane plus the call's nesting depth
    lane: int
    #: still open at the end of the ring (drawn to the ring's end)
    open: bool = False
    #: already open at the ring's oldest record (its start is the ring's start, not the call's)
    before: bool = False


@dataclass
class TimelineStep:
    """A ``rankscope.progress`` step."""

    at: float
    step: int


@dataclass
class TimelineRow:
    """One rank (``host:rank``): its calls as bars, one lane per nesting depth of each thread."""

    label: str
    #: the first lane of each thread, and its name
    threads: list[tuple[int, str]]
    lanes: int
    slices: list[TimelineSlice]
    steps: list[TimelineStep]
    #: the ring's last record (microseconds)
    end: float
    #: a word on the rank's clock (``clock +250.000 ms vs node1``)
    clock: str = ""


@dataclass
class TimelineSection:
    """The calls of every rank on one wall-clock axis (``trace export --html``)."""

    title: str
    rows: list[TimelineRow]
    #: the axis, microseconds since the earliest file's start
    start: float
    end: float
    notes: list[str] = field(default_factory=list)
    kind: str = "timeline"


Section = Union[FlameSection, GridSection, FrSection, HeatmapSection, TableSection, TimelineSection]


@dataclass
class Page:
    """One page: a title line, the verdict as the text report words it, then the pictures."""

    title: str
    #: The report's first line (what was looked at, when).
    subtitle: str
    verdict: list[str]
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

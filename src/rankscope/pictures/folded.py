"""Collapsed stacks (``--folded``): one line per distinct stack, ``frame;frame;... COUNT`` (pure).

The format flamegraph.pl, inferno and speedscope read: frames outermost first, separated by ``;``,
then a space and the count. The thread's name is the outermost frame; the count is the ranks with
that stack, summed over the samples (rank-samples) when there are several. Library frames are
folded as the text report folds them (``… 12 frames in torch``) unless ``full``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rankscope.stacks.frames import describe_frame
from rankscope.stacks.render import FoldedRun, fold_frames
from rankscope.stacks.report import StackGroup


def frame_text(text: str) -> str:
    """One frame as the format allows it: no ``;`` (the separator), no line breaks."""
    return " ".join(text.replace(";", ",").split())


def folded_lines(samples: Sequence[Sequence[StackGroup]], full: bool = False) -> list[str]:
    """``samples``: each sample's stack groups (one sample: the report's groups)."""
    counts: dict[tuple[str, ...], int] = {}
    for groups in samples:
        for group in groups:
            items = fold_frames(group.frames, full)
            names = [i.text if isinstance(i, FoldedRun) else describe_frame(i, not full) for i in items]
            key = tuple(frame_text(n) or "?" for n in [group.thread, *names])
            counts[key] = counts.get(key, 0) + len(group.members)
    return [f"{';'.join(key)} {count}" for key, count in sorted(counts.items())]

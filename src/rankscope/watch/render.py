"""The watcher's lines on stderr: one per capture, one per thing a person should know. Pure."""

from __future__ import annotations

from rankscope.folding import RankSet
from rankscope.watch.model import Trigger

PREFIX = "rankscope watch:"


def capture_line(trigger: Trigger, verdict: str, ranks: list[int], where: str) -> str:
    """``rankscope watch: stall (no progress marker advanced for 10 s): VERDICT [ranks 1] -> DIR``."""
    culprits = f" [culprit {RankSet.of(ranks).phrase()}]" if ranks else ""
    return f"{PREFIX} {trigger.reason.value} ({trigger.text}): {verdict}{culprits} -> {where}"


def note(text: str) -> str:
    return f"{PREFIX} {text}"

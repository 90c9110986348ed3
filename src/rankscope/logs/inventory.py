"""`logs ranks`: which ranks appear in a log, how many lines each, first and last timestamps."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from rankscope.logs.prefixes import host_and_rank, split_line

_TIMESTAMP = re.compile(rb"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)")


@dataclass
class RankLines:
    lines: int = 0
    first_time: Optional[str] = None
    last_time: Optional[str] = None


@dataclass
class Inventory:
    ranks: dict[bytes, RankLines] = field(default_factory=dict)
    unprefixed: int = 0
    lines: int = 0

    def feed(self, chunk: bytes, fixed_label: Optional[bytes] = None, allow_srun: bool = False) -> None:
        lines = chunk.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        self.lines += len(lines)
        ranks = self.ranks
        for line in lines:
            if fixed_label is not None:
                label: Optional[bytes] = fixed_label
                text = line
            else:
                split = split_line(line, allow_srun)
                label, text = split.label, split.text
            if label is None:
                self.unprefixed += 1
                continue
            entry = ranks.get(label)
            if entry is None:
                entry = ranks[label] = RankLines()
            entry.lines += 1
            if b"-" in text[:40]:
                stamp = _TIMESTAMP.search(text, 0, 40)
                if stamp is not None:
                    value = stamp.group(1).decode()
                    if entry.first_time is None:
                        entry.first_time = value
                    entry.last_time = value

    def sorted_labels(self) -> list[bytes]:
        def key(label: bytes) -> tuple[str, int, bytes]:
            host, rank = host_and_rank(label)
            return (host or "", -1 if rank is None else rank, label)

        return sorted(self.ranks, key=key)

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for label in self.sorted_labels():
            host, rank = host_and_rank(label)
            entry = self.ranks[label]
            rows.append(
                {
                    "label": label.decode("utf-8", "replace"),
                    "host": host,
                    "rank": rank,
                    "lines": entry.lines,
                    "first_time": entry.first_time,
                    "last_time": entry.last_time,
                }
            )
        return {"lines": self.lines, "unprefixed_lines": self.unprefixed, "ranks": rows}

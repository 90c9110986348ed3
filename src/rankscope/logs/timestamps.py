"""Timestamps at the start of a log line's text (``2024-05-01 10:00:01,123``, ISO ``T`` forms)."""

from __future__ import annotations

import re
from typing import Optional

TIMESTAMP = re.compile(rb"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)")


def stamp_at(chunk: bytes, start: int) -> Optional[str]:
    """The timestamp in the first 40 bytes of the text at ``start`` (after a prefix), if any."""
    end = chunk.find(b"\n", start, start + 200)
    text = chunk[start : start + 200 if end < 0 else end]
    if text.startswith(b"[rank"):
        text = text[text.find(b"]") + 1 :].lstrip(b": ")
    stamp = TIMESTAMP.search(text, 0, 40)
    return stamp.group(1).decode() if stamp is not None else None


def sortable(stamp: str) -> str:
    """``2024-05-01T10:00:01,5`` and ``2024-05-01 10:00:01.5`` compare as the same instant."""
    return stamp.replace("T", " ").replace(",", ".")

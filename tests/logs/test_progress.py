"""Reading progress: shown on a terminal, silent otherwise."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rankscope.logs.progress import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@dataclass
class _Stats:
    bytes_read: int = 0


def test_progress_on_a_terminal_then_cleared() -> None:
    stream, stats = _Tty(), _Stats()
    progress = Progress(2_000_000, stream=stream)
    progress._last = -1.0  # no wait for the first update
    for chunk in progress.track(iter([1, 2]), "job.log", stats):
        stats.bytes_read += 1_000_000 * chunk
    progress.close()
    text = stream.getvalue()
    assert "\rreading job.log  1 / 2 MB" in text
    assert text.endswith("\r\x1b[K")


def test_progress_is_silent_when_piped_or_disabled() -> None:
    for stream, enabled in ((io.StringIO(), True), (_Tty(), False)):
        progress = Progress(10, stream=stream, enabled=enabled)
        assert list(progress.track(iter([1, 2, 3]), "x", _Stats())) == [1, 2, 3]
        progress.close()
        assert stream.getvalue() == ""

"""The frozen options of `net probe`, and the command line that reproduces them on another node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rankscope.cmdline import flag, to_flags


@dataclass(frozen=True)
class ProbeOptions:
    """Everything one `rankscope net probe` command line asks for."""

    targets: tuple[str, ...]
    port: Optional[int] = flag("--port", None)
    timeout: float = flag("--timeout", 3.0)
    as_json: bool = flag("--json", False)
    serve: Optional[int] = flag("--serve", None)
    bind: str = flag("--bind", "127.0.0.1")
    hold: float = flag("--hold", 0.0)
    retry_refused: bool = flag("--retry-refused", False)

    def to_argv(self) -> list[str]:
        """``["net", "probe", ...]``: read back by the `net probe` command, it gives these options again."""
        return ["net", "probe", *to_flags(self), "--", *self.targets]

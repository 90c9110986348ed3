"""The frozen options of `net probe`, and the command line that reproduces them on another node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ProbeOptions:
    """Everything one `rankscope net probe` command line asks for."""

    targets: tuple[str, ...]
    port: Optional[int] = None
    timeout: float = 3.0
    as_json: bool = False
    serve: Optional[int] = None
    bind: str = "127.0.0.1"
    hold: float = 0.0
    retry_refused: bool = False

    def to_argv(self) -> list[str]:
        """``["net", "probe", ...]``: read back by the `net probe` command, it gives these options again."""
        argv = ["net", "probe", "--timeout", repr(self.timeout)]
        if self.as_json:
            argv.append("--json")
        if self.port is not None:
            argv += ["--port", str(self.port)]
        if self.serve is not None:
            argv += ["--serve", str(self.serve), "--bind", self.bind, "--hold", repr(self.hold)]
        if self.retry_refused:
            argv.append("--retry-refused")
        return [*argv, "--", *self.targets]

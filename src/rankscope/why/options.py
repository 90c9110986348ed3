"""What a `rankscope why` run is asked to do, and the command line every node of a multi-node run gets.

As `stacks` does (rankscope.stacks.options): each field names its flag (rankscope.cmdline), and
:meth:`to_argv` derives ``why --local --json ...`` from the same object, so no option is lost on
the way to a node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from rankscope.cmdline import flag as _flag
from rankscope.cmdline import to_flags

#: Seconds for the whole pass by default: every signal inside it.
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class WhyOptions:
    """The collection options of `rankscope why` (their names are the click parameters')."""

    pids: tuple[int, ...] = _flag("--pid", ())
    #: The job's output files (besides what is found without asking).
    logs: tuple[str, ...] = _flag("--log", ())
    #: ``FILE:BYTES``: read that output file from byte BYTES on (what a watcher passes after an
    #: elastic restart: the earlier attempt's output is not the current workers').
    log_from: tuple[str, ...] = _flag("--log-from", ())
    #: Seconds since the epoch: what the job left before is not read (its ranks' dumps and error
    #: files, cores, trace rings, output files not written since; what a watcher passes after an
    #: elastic restart: that is the earlier attempt's).
    since: Optional[float] = _flag("--since", None)
    #: Flight-recorder dumps (a directory or prefix, as `rankscope fr`).
    fr: Optional[str] = _flag("--fr", None)
    #: A directory of core files.
    cores: Optional[str] = _flag("--cores", None)
    #: A directory of `rankscope trace run` rings (trace-* files): where each rank last was.
    trace: Optional[str] = _flag("--trace", None)
    #: One deadline for the whole pass, seconds.
    timeout: float = _flag("--timeout", DEFAULT_TIMEOUT)
    #: Only the processes of this SLURM job (what --jobid passes to every node).
    slurm_job: Optional[str] = _flag("--slurm-job", None)

    @property
    def post_mortem_only(self) -> bool:
        """Only saved inputs named, no --pid: the job on this node is not looked for."""
        return not self.pids and not self.slurm_job and bool(self.logs or self.fr or self.cores or self.trace)

    def for_node(self, node_timeout: float) -> WhyOptions:
        """One node's options: it answers, with what it has, before the caller's per-node deadline."""
        return replace(self, timeout=min(self.timeout, max(1.0, node_timeout * 0.8 - 1.0)))

    def to_argv(self) -> list[str]:
        return ["why", "--local", "--json", *to_flags(self)]

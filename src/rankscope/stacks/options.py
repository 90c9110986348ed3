"""What a `rankscope stacks` collection is asked to do, and the command line that asks it.

The CLI (rankscope.cli.stacks) builds one :class:`StacksOptions` from its command line; a
multi-node run derives every node's command line from the same object (:meth:`to_argv`), so a
new option cannot be forgotten on the way to the nodes: each field names its flag, and
tests/test_cli.py checks that the derived command line reads back to an equal object.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from rankscope.cmdline import flag as _flag
from rankscope.cmdline import from_flags, to_flags
from rankscope.stacks.pyspy_cmd import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

#: What the head of a multi-node run adds to every node's ``stacks --local --json``: answer with the
#: raw material (rankscope.stacks.node, schema ``rankscope.stacks.node/1``), not the report. A person's
#: own ``stacks --local --json`` prints the ``rankscope.stacks`` report as before.
NODE_ANSWER = "--node-answer"


@dataclass(frozen=True)
class StacksOptions:
    """The collection options of `rankscope stacks` (their names are the click parameters')."""

    pids: tuple[int, ...] = _flag("--pid", ())
    all_python: bool = _flag("--all-python", False)
    #: Native frames of the representatives of each group of equal Python stacks ...
    native: bool = _flag("--native", False)
    #: ... or of every process.
    native_all: bool = _flag("--native-all", False)
    with_locals: bool = _flag("--locals", False)
    samples: int = _flag("--samples", 1)
    interval: float = _flag("--interval", 1.0)
    timeout: float = _flag("--timeout", DEFAULT_TIMEOUT)
    deadline: float = _flag("--deadline", DEFAULT_DEADLINE)
    parallelism: Optional[int] = _flag("--jobs", None)
    #: Stacks through each process's in-process handler (a request to its own thread, no ptrace) instead of py-spy.
    via_signal: bool = _flag("--via-signal", False)
    #: Do not ask the ranks' in-process handlers for their flight recorders (asked by default).
    no_fr: bool = _flag("--no-fr", False)
    #: Only the processes of this SLURM job (a multi-node --jobid run sets it on every node).
    slurm_job: Optional[str] = _flag("--slurm-job", None)

    def for_node(self, node_timeout: float) -> StacksOptions:
        """The options one node of a multi-node run gets: it must finish, with partial results,
        before the caller's per-node deadline drops it."""
        return replace(self, deadline=min(self.deadline, max(1.0, node_timeout * 0.8 - 1.0)))

    def to_argv(self) -> list[str]:
        """``stacks --local --json --node-answer`` (every node of a multi-node run answers with its raw
        material) and a flag for every option that is not its default."""
        return ["stacks", "--local", "--json", NODE_ANSWER, *to_flags(self)]

    @classmethod
    def from_argv(cls, argv: list[str]) -> Optional[StacksOptions]:
        """The options :meth:`to_argv` wrote into ``argv``, read back by the same field metadata
        (the light entry of every node of a multi-node run, rankscope.cli.node); None for any
        other command line (it goes to the full command line, click)."""
        if argv[:3] != ["stacks", "--local", "--json"]:
            return None
        values = from_flags(cls, [word for word in argv[3:] if word != NODE_ANSWER])
        return None if values is None else cls(**values)

"""What a `rankscope stacks` collection is asked to do, and the command line that asks it.

The CLI (rankscope.cli.stacks) builds one :class:`StacksOptions` from its command line; a
multi-node run derives every node's command line from the same object (:meth:`to_argv`), so a
new option cannot be forgotten on the way to the nodes: each field names its flag, and
tests/test_cli.py checks that the derived command line reads back to an equal object.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

from rankscope.stacks.pyspy_cmd import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

#: Field metadata key: the `rankscope stacks` flag that sets the field.
FLAG = "flag"


def _flag(name: str, default: Any) -> Any:
    return field(default=default, metadata={FLAG: name})


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
        """``stacks --local --json`` and a flag for every option that is not its default."""
        argv = ["stacks", "--local", "--json"]
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value == spec.default:
                continue
            flag = spec.metadata[FLAG]
            if isinstance(value, bool):
                argv.append(flag)
            elif isinstance(value, tuple):
                for item in value:
                    argv += [flag, str(item)]
            else:
                argv += [flag, str(value)]  # str(float) is repr: it reads back to the same float
        return argv

    @classmethod
    def from_argv(cls, argv: list[str]) -> Optional[StacksOptions]:
        """The options :meth:`to_argv` wrote into ``argv``, read back by the same field metadata
        (the light entry of every node of a multi-node run, rankscope.cli.node); None for any
        other command line (it goes to the full command line, click)."""
        if argv[:3] != ["stacks", "--local", "--json"]:
            return None
        specs = {spec.metadata[FLAG]: spec for spec in fields(cls)}
        values: dict[str, Any] = {}
        rest = argv[3:]
        try:
            while rest:
                flag, *rest = rest
                spec = specs.get(flag)
                if spec is None:
                    return None
                if isinstance(spec.default, bool):
                    values[spec.name] = True
                    continue
                text, *rest = rest
                if isinstance(spec.default, tuple):
                    values[spec.name] = (*values.get(spec.name, ()), int(text))
                else:
                    values[spec.name] = _VALUE_TYPES[spec.type](text)  # type: ignore[index]
        except (ValueError, KeyError):
            return None
        return cls(**values)


#: How each non-flag option is read back, by its annotation.
_VALUE_TYPES: dict[str, Any] = {"int": int, "float": float, "Optional[int]": int, "Optional[str]": str}

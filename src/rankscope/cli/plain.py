"""The command line of a plain local `rankscope stacks` run, read without click.

Most `rankscope stacks` runs (by hand on a node, and every node of a multi-node run, which
runs `rankscope stacks --local --json ...`) use a handful of options. For those, importing
click and the CLI costs more than dumping several ranks. `parse_plain` reads exactly that
subset, with click's own rules for it (tests/test_cli.py checks both parsers agree), and
returns None for anything else (another verb, --help, other options, a value click would
refuse), which then goes through click as usual.

Only os is imported here.
"""

from __future__ import annotations

import math
import os

from rankscope.stacks.pyspy_cmd import DEFAULT_DEADLINE, DEFAULT_TIMEOUT

TYPE_CHECKING = False  # typing is slow to import; annotations only
if TYPE_CHECKING:
    from collections.abc import Sequence

#: click.FloatRange(0.1) on --timeout and --deadline.
MIN_SECONDS = 0.1
_FLAGS = {
    "--native": "native",
    "--locals": "with_locals",
    "--json": "as_json",
    "--full": "full",
    "--local": "local",
}
_VALUED = {"--pid", "--timeout", "--deadline", "--out"}


class PlainStacks:
    """The options of a plain `rankscope stacks` run (the names of the click command's parameters)."""

    __slots__ = (
        "pids",
        "native",
        "with_locals",
        "timeout",
        "deadline",
        "as_json",
        "full",
        "local",
        "color",
        "out",
    )

    def __init__(self) -> None:
        self.pids: tuple[int, ...] = ()
        self.native = False
        self.with_locals = False
        self.timeout = DEFAULT_TIMEOUT
        self.deadline = DEFAULT_DEADLINE
        self.as_json = False
        self.full = False
        self.local = False
        self.color: bool | None = None
        self.out: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= MIN_SECONDS else None


def parse_plain(argv: Sequence[str]) -> PlainStacks | None:
    """``rankscope ARGV`` as PlainStacks when it is a plain local `stacks` run, else None."""
    if not argv or argv[0] != "stacks":
        return None
    plain = PlainStacks()
    pids: list[int] = []
    args = list(argv[1:])
    while args:
        name, has_value, value = args.pop(0).partition("=")
        if name in _FLAGS or name in ("--color", "--no-color"):
            if has_value:
                return None  # click: "option does not take a value"
            if name in _FLAGS:
                setattr(plain, _FLAGS[name], True)
            else:
                plain.color = name == "--color"
            continue
        if name not in _VALUED:
            return None
        if not has_value:
            if not args:
                return None
            value = args.pop(0)
        if name == "--pid":
            if not (value.isascii() and value.isdigit()):
                return None
            pids.append(int(value))
        elif name == "--out":
            if not value or (os.path.exists(value) and not os.path.isdir(value)):
                return None  # click.Path(file_okay=False) has its own message for these
            plain.out = value
        else:
            seconds = _seconds(value)
            if seconds is None:
                return None
            setattr(plain, name[2:], seconds)
    plain.pids = tuple(pids)
    return plain

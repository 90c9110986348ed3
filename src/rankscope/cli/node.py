"""The `rankscope` console entry: `stacks` on this node without the command-line library; every
other command line goes to click (rankscope.cli.main).

A plain run on this node (``rankscope stacks``, ``stacks --pid P --json``, ...) and the command
line every node of a multi-node run gets (``rankscope stacks --local --json ...``, derived from one
:class:`~rankscope.stacks.options.StacksOptions` by :meth:`~StacksOptions.to_argv`) are read by
the same field metadata (rankscope.cli.stacks_request.read_plain) into the request click would
have made, and run the same pipeline (``run_here``), so they do not pay click's import nor the
full command's (measured in docs/benchmarks.md). Anything else (``--help``, ``--out``, nodes, a
flag click reads differently, a bad value) takes the full path.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not needed to read a plain command line
if TYPE_CHECKING:
    from typing import Any, Optional

    from rankscope.stacks.options import StacksOptions


def node_options(argv: list[str]) -> Optional[StacksOptions]:
    """The options of a node's ``stacks --local --json`` command line; None for any other (and for a
    combination the full command refuses: it says why)."""
    if argv[:3] != ["stacks", "--local", "--json"]:
        return None
    from rankscope.cli.stacks_request import read_plain

    request = read_plain(argv)
    return None if request is None else request.options


def main(argv: Optional[list[str]] = None) -> Any:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["stacks"]:
        from rankscope.cli.stacks_request import read_plain, run_here

        request = read_plain(words)
        if request is not None:
            from rankscope.cli.guard import run_guarded

            run_guarded(lambda: run_here(request))
    from rankscope.cli.main import main as full_main

    return full_main(argv)

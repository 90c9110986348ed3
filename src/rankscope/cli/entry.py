"""The `rankscope` console script.

A plain local `rankscope stacks` run (rankscope.cli.plain) gets a head start: its first
py-spy dumps start at once (rankscope.stacks.prefetch), and it runs without importing click
(rankscope.cli.stacks_report). Everything else goes to the click CLI (rankscope.cli.main).
`RANKSCOPE_PREFETCH=0` turns both off.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if os.environ.get("RANKSCOPE_PREFETCH", "1") != "0":
        from rankscope.cli.plain import parse_plain

        plain = parse_plain(argv)
        if plain is not None:
            from rankscope.stacks.prefetch import start

            start(plain.pids, plain.native, plain.with_locals, plain.timeout)
            from rankscope.cli.guard import run_guarded
            from rankscope.cli.stacks_report import run_plain

            run_guarded(lambda: run_plain(plain))
    from rankscope.cli.main import main as cli_main

    cli_main()

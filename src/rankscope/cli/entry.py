"""The `rankscope` console script: give a local `stacks` run a head start, then run the CLI.

rankscope.stacks.prefetch starts the first py-spy dumps before click and the rest of
rankscope are imported, so the imports overlap with the dumps instead of preceding them.
"""

from __future__ import annotations

import sys


def main() -> None:
    from rankscope.stacks.prefetch import start

    start(sys.argv[1:])
    from rankscope.cli.main import main as cli_main

    cli_main()

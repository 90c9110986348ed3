"""How every rankscope command ends: one line per error and a documented exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

# rankscope.errors is imported when a command fails: `rankscope stacks` starts its dumps before it
# (docs/benchmarks.md, "Start-up").


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def run_guarded(command: Callable[[], object], debug: bool = False) -> NoReturn:
    """Run ``command`` and exit with its int result (0 otherwise); errors become one line and a code.

    With ``debug`` a rankscope or internal error keeps its traceback.
    """
    try:
        result = command()
    except KeyboardInterrupt:
        _say("rankscope: interrupted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:
        from rankscope.errors import ExitCode, RankscopeError

        if debug:
            raise
        if isinstance(exc, RankscopeError):
            _say(f"rankscope: error: {exc.one_line()}")
            sys.exit(int(exc.exit_code))
        # A bug: kept to one line unless asked.
        _say(f"rankscope: internal error: {type(exc).__name__}: {exc} — rerun with --debug and report it")
        sys.exit(ExitCode.INTERNAL)
    sys.exit(result if isinstance(result, int) else 0)

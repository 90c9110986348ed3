"""`rankscope trace run`: a script run in this process, traced, as `python SCRIPT ARGS` would run it.

torchrun --no-python starts rankscope as the worker, so the tracer is on before the script's first
line. Tracing that cannot start (a full disk, a bad directory) is said through ``warn`` and the
script runs untraced; the script's own exit code is returned, its own error printed as Python
prints it (rankscope's and runpy's frames left out).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

from rankscope.errors import ExitCode, RankscopeError


def run_traced(
    script: str,
    args: tuple[str, ...] = (),
    *,
    out: str = ".",
    include: tuple[str, ...] = (),
    lines: bool = False,
    full: bool = False,
    sample_ms: Optional[float] = None,
    calls: bool = False,
    ring_records: int = 1 << 18,
    warn: Callable[[str], None],
) -> int:
    """Run ``script`` with ``args`` under :func:`rankscope.trace.start`; its exit code."""
    import runpy
    import warnings

    import rankscope.trace as rt

    path_of_script = os.path.abspath(script)
    if not os.path.isfile(path_of_script):
        raise RankscopeError(f"{script}: no such file", "name the training script", ExitCode.BAD_INPUT)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", RuntimeWarning)
        path = rt.start(
            out=out,
            include=include,
            lines=lines,
            full=full,
            sample_ms=sample_ms,
            calls=calls or sample_ms is None,
            ring_records=max(ring_records, 16),
        )
    if path is None:  # a full disk, a bad --out: the program runs untraced; a job never stops for its tracer
        reason = str(said[-1].message) if said else "rankscope.trace: tracing not started"
        warn(f"{reason} (the program runs untraced)")
    sys.argv = [path_of_script, *args]
    sys.path[0] = os.path.dirname(path_of_script)
    try:
        runpy.run_path(path_of_script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if isinstance(code, int):
            return code
        if code is not None:
            warn(str(code))
            return 1
        return 0
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # the program's own error: its traceback, as python prints it
        import traceback

        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != path_of_script:
            tb = tb.tb_next  # rankscope's and runpy's frames are not the program's
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        return 1
    finally:
        rt.stop()
    return 0

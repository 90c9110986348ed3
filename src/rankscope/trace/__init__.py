"""Trace where a process is: calls and returns (or samples) into a crash-proof per-process ring file.

Inside a training process::

    import rankscope.trace
    rankscope.trace.start(out="traces")          # or: with rankscope.trace.region(out="traces"): ...
    ...
    rankscope.trace.stop()

or with no code change: ``torchrun --no-python rankscope trace run -- train.py``. Read the files
with ``rankscope trace tail DIR`` / ``trace grep`` / ``trace show`` (docs/trace.md).

Nested ``start``/``stop`` pairs count: only the outermost pair starts and stops tracing (the inner
calls' options are ignored). Nothing here raises into the traced program: a tracer that cannot
start warns once (``RuntimeWarning``) and returns ``None``.

Python 3.9, standard library only; importing this module imports nothing else.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Optional

    from rankscope.trace.tracer import Tracer

__all__ = ["active_path", "region", "start", "stop"]

_tracer: Optional[Tracer] = None
_depth = 0


def start(
    out: str = ".",
    include: Iterable[str] = (),
    lines: bool = False,
    full: bool = False,
    sample_ms: Optional[float] = None,
    calls: bool = True,
    ring_records: Optional[int] = None,
) -> Optional[str]:
    """Start tracing this process into ``out/trace-{host}-{rank}-{pid}``; returns that path.

    ``include``: packages traced besides the user's own code (``["torch.distributed"]``).
    ``lines``: line events too. ``full``: keep every event (the file grows) instead of the last
    ``ring_records`` (default 262144, 6 MiB). ``sample_ms``: a thread also records every thread's
    stack every ``sample_ms`` milliseconds; with ``calls=False`` it is the only recorder (cheapest).
    """
    global _tracer, _depth
    if _tracer is not None:
        _depth += 1
        return _tracer.path
    try:
        import os

        from rankscope.trace import format as fmt
        from rankscope.trace.tracer import Tracer

        tracer = Tracer(
            os.fspath(out),
            include=include,
            lines=lines,
            full=full,
            sample_ms=sample_ms,
            calls=calls,
            ring_records=ring_records or fmt.DEFAULT_RING_RECORDS,
        )
        tracer.start()
    except Exception as exc:
        _warn(f"rankscope.trace: tracing not started: {exc}")
        return None
    _tracer, _depth = tracer, 1
    _register_exit_hooks()
    return tracer.path


def stop() -> None:
    """End the outermost ``start``: the hooks are removed and the file is complete."""
    global _tracer, _depth
    if _tracer is None:
        return
    _depth -= 1
    if _depth > 0:
        return
    tracer, _tracer = _tracer, None
    try:
        tracer.stop()
    except Exception as exc:
        _warn(f"rankscope.trace: stopping: {exc}")


def _warn(message: str) -> None:
    """One ``RuntimeWarning`` at the caller of start/stop; where warnings are errors (``-W error``),
    one line on stderr instead: never an exception into the program."""
    try:
        import warnings

        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:
        try:
            import os

            os.write(2, (message + "\n").encode("utf-8", "replace"))
        except Exception:
            pass


def active_path() -> Optional[str]:
    """The file being written, or ``None`` when not tracing."""
    return None if _tracer is None else _tracer.path


class region:
    """``with rankscope.trace.region(out="traces"):`` traces the block (same options as :func:`start`)."""

    def __init__(self, out: str = ".", **options: object) -> None:
        self.out = out
        self.options = options
        self.path: Optional[str] = None

    def __enter__(self) -> Optional[str]:
        self.path = start(self.out, **self.options)  # type: ignore[arg-type]
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            stop()


_hooks_registered = False


def _register_exit_hooks() -> None:
    global _hooks_registered
    if _hooks_registered:
        return
    _hooks_registered = True
    import atexit
    import os

    atexit.register(_stop_all)
    os.register_at_fork(after_in_child=_forget_in_child)


def _stop_all() -> None:
    global _depth
    if _tracer is not None:
        _depth = 1
        stop()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) must not write into its parent's ring: it stops tracing."""
    global _tracer, _depth
    if _tracer is None:
        return
    tracer, _tracer, _depth = _tracer, None, 0
    try:
        tracer.running = False
        tracer._hooks["halt"]()
        import sys

        if sys.version_info >= (3, 12) and tracer._tool is not None:
            tracer._stop_monitoring()
        else:
            sys.settrace(None)
    except Exception:
        pass

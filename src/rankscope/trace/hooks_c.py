"""The tracer's event callbacks from the C extension (``_ctrace.c``): its ring writes each record.

Python 3.9, standard library only; nothing here raises into the traced program.
"""

from __future__ import annotations

import time

from rankscope.trace import format as fmt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rankscope.trace.tracer import Tracer


def make_c_hooks(tracer: Tracer, ctrace: Any, ticks: bool, disable: Any) -> dict[str, Any]:
    """The hooks of the C extension ``ctrace`` over the tracer's file; ``ticks``: stamp with the CPU's
    tick counter where the extension can (calibrated against the clock here); ``disable``:
    ``sys.monitoring.DISABLE`` (None before Python 3.12)."""
    tf = tracer.file
    source = tf.mm if tf.ring else tf._chunk
    offset = fmt.HEADER_SIZE + tf.names_bytes if tf.ring else 0
    ring = ctrace.Ring(source, offset, tf.end, tracer.intern, tracer.lap, disable, ticks)
    tracer._ring = ring
    if ring.uses_ticks():  # two calibration pairs 5 ms apart, so a ring killed at once still converts
        tf.use_ticks(ring.calibration)
        time.sleep(0.005)
        tf.recalibrate()
    get = tracer._ids.get
    emit = ring.emit

    def on_unwind(code: Any, offset: int, exc: Any) -> None:
        k = get(id(code))
        if k is not None and k >= 0:
            emit(k | fmt.UNWIND)

    return {
        "emit": emit,
        "position": ring.position,
        "halt": ring.halt,
        "start": ctrace.Hook(ring, fmt.CALL),
        "return": ctrace.Hook(ring, fmt.RETURN),
        "line": ctrace.Hook(ring, fmt.LINE),
        "unwind": on_unwind,
    }

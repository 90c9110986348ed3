"""Imported at interpreter start by ``rankscope-inproc.pth`` when ``RANKSCOPE_INPROC`` is set.

``RANKSCOPE_INPROC=1`` (any value but ``0``, ``false``, ``no``, ``off`` or empty) enables the
in-process handler (:mod:`rankscope.inproc.handler`) in every Python process that starts with it in
its environment: torchrun's workers, with no change to the script. Never raises: a failure is kept
in ``rankscope.inproc.handler.last_error()`` and the process runs on.
"""

from __future__ import annotations

import os


def _bootstrap() -> None:
    try:
        value = os.environ.get("RANKSCOPE_INPROC", "").strip().lower()
        if value in ("", "0", "false", "no", "off"):
            return
        from rankscope.inproc.handler import enable

        enable()
    except BaseException:  # noqa: BLE001 - interpreter start-up must go on
        pass


_bootstrap()

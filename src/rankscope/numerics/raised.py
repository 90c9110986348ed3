"""A side of a comparison whose own code raised: one line naming the side, the module and the user's line."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from rankscope.errors import ExitCode, RankscopeError
from rankscope.numerics.report import Side

T = TypeVar("T")

_RANKSCOPE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SideRaisedError(RankscopeError, RuntimeError):
    """The model (or its factory) raised on one side; ``original`` is the exception it raised."""

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(
            message,
            "make the model run on that side on its own first (the original exception is .original)",
            ExitCode.BAD_INPUT,
        )
        self.original = original


def _users_line(error: BaseException) -> str:
    """`` at FILE:LINE in FUNCTION``: the innermost frame outside torch and rankscope, or ``""``."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        name = os.path.abspath(frame.filename)
        if name.startswith(_RANKSCOPE) or f"{os.sep}torch{os.sep}" in name:
            continue
        return f" (at {frame.filename}:{frame.lineno} in {frame.name})"
    return ""


def describe(which: str, side: Side, where: str, error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = f": {text[0]}" if text else ""
    return (
        f"the {which} side ({side.label}) raised {where}: {type(error).__name__}{first}{_users_line(error)}"
    )


@contextmanager
def side_raises(which: str, side: Side, where: Callable[[], str]) -> Iterator[None]:
    """Turn an exception of the body into :class:`SideRaisedError`; ``where()`` is asked after it."""
    try:
        yield
    except Exception as error:  # the user's model: anything
        raise SideRaisedError(describe(which, side, where(), error), error) from None

"""Shell words: what the local shell must pass through untouched, and what a node's shell must expand.

A command is a list of words. A :class:`Lit` is text that reaches the program as it is (a script
argument with spaces, quotes or ``$``): it is always written with :func:`shlex.quote`. A
:class:`Expand` is shell text meant to be expanded where the command finally runs
(``"$(hostname -s):"``, ``"$SLURM_PROCID"``); it is written as it is. :func:`bash_c` turns a word
list into ``bash -c '...'`` with the whole inner command quoted once more, so that every expansion
is delayed until the node's own shell reads it: no hand-made escaping anywhere.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Expand:
    text: str


Word = Union[Lit, Expand]


def lits(values: Iterable[str]) -> list[Word]:
    return [Lit(value) for value in values]


def words(*parts: Union[str, Word]) -> list[Word]:
    """Plain strings become literal words; :class:`Expand` words stay as they are."""
    return [Lit(part) if isinstance(part, str) else part for part in parts]


def render(command: Sequence[Word]) -> str:
    return " ".join(shlex.quote(word.text) if isinstance(word, Lit) else word.text for word in command)


def bash_c(command: Sequence[Word]) -> list[Word]:
    """``bash -c '<command>'``: the local shell passes the inner command through, the node's bash expands it."""
    return [Lit("bash"), Lit("-c"), Lit(render(command))]

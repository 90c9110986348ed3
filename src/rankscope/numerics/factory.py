"""``MODULE:FACTORY`` on the command line: the user's own function that builds a model or its inputs.

MODULE is a module name, imported as ``python -m`` would (the current directory first on the
path), or a path to a ``.py`` file (its directory put first on the path, so its own imports work).
FACTORY is a name in it (``make_model``, or dotted: ``Config.small``), called with no arguments.
Every failure is one line naming what was asked for (exit 8), never the import's traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rankscope.errors import BadInputError

HINT = "pass MODULE:FACTORY: a module name or a .py file, and a function in it that takes no arguments"


@dataclass(frozen=True)
class FactorySpec:
    module: str
    name: str

    @property
    def text(self) -> str:
        return f"{self.module}:{self.name}"


def parse_spec(text: str) -> FactorySpec:
    """``pkg.models:make_model`` or ``path/to/models.py:make_model`` (ValueError when malformed)."""
    module, sep, name = text.rpartition(":")
    if not sep or not module or not name or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"{text!r} is not MODULE:FACTORY (models:make_model, path/to/models.py:make_model)")
    return FactorySpec(module, name)


def _where(error: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of the error, or ``""``."""
    frames = traceback.extract_tb(error.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def import_module(spec: FactorySpec) -> ModuleType:
    """The module named by ``spec`` (BadInputError, one line, when it cannot be imported)."""
    module = spec.module
    is_path = module.endswith(".py") or os.sep in module
    try:
        if is_path:
            path = os.path.abspath(module)
            if not os.path.isfile(path):
                raise BadInputError(f"{spec.text}: no such file {module}", HINT)
            directory = os.path.dirname(path)
            if directory not in sys.path:
                sys.path.insert(0, directory)
            name = os.path.splitext(os.path.basename(path))[0]
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise BadInputError(f"{spec.text}: {module} cannot be loaded as Python", HINT)
            loaded = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = loaded
            loader_spec.loader.exec_module(loaded)
            return loaded
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as python -m does
        return importlib.import_module(module)
    except BadInputError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise BadInputError(
                f"{spec.text}: no module named {exc.name!r} (looked in {os.getcwd()} and sys.path)", HINT
            ) from None
        raise BadInputError(
            f"{spec.text}: importing {module} raised {_first_line(exc)}{_where(exc)}", HINT
        ) from None
    except Exception as exc:  # the user's module: anything
        raise BadInputError(
            f"{spec.text}: importing {module} raised {_first_line(exc)}{_where(exc)}", HINT
        ) from None


def load_factory(spec: FactorySpec) -> Callable[[], Any]:
    """The function ``spec`` names (BadInputError when it is missing or not callable)."""
    found: Any = import_module(spec)
    for part in spec.name.split("."):
        if not hasattr(found, part):
            raise BadInputError(f"{spec.text}: {spec.module} has no {spec.name!r}", HINT)
        found = getattr(found, part)
    if not callable(found):
        raise BadInputError(f"{spec.text}: {spec.name} is a {type(found).__name__}, not a function", HINT)
    return found  # type: ignore[no-any-return]


def call_inputs(spec: FactorySpec) -> tuple[Any, ...]:
    """The positional inputs the inputs factory returns: a tuple as several, anything else as one."""
    factory = load_factory(spec)
    try:
        made = factory()
    except Exception as exc:  # the user's function: anything
        raise BadInputError(f"{spec.text} raised {_first_line(exc)}{_where(exc)}", HINT) from None
    return made if isinstance(made, tuple) else (made,)

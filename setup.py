"""Build hooks (the rest of the metadata is in pyproject.toml).

The optional C hot path of the tracer (``rankscope.trace._ctrace``) is built when a compiler is there;
without one the install still succeeds and the tracer runs in pure Python (docs/trace.md).

rankscope installs ``rankscope-inproc.pth`` beside its package: at interpreter start it imports
``rankscope.inproc.bootstrap`` only when ``RANKSCOPE_INPROC`` is set (one dictionary lookup otherwise),
which enables the in-process handler with no change to the training script (docs/inproc.md). A wheel
gets the file through build_py (everything in build_lib lands in site-packages); an editable install
(PEP 660) through the editable wheel's strategy, which otherwise writes only its own ``.pth``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = Path(__file__).resolve().parent / "src" / "rankscope-inproc.pth"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name))


class _WithPth:
    """An editable wheel's strategy that also writes rankscope-inproc.pth into the wheel."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, wheel: Any, files: Any, mapping: Any) -> None:
        self.inner(wheel, files, mapping)
        wheel.writestr(PTH.name, PTH.read_bytes())

    def __enter__(self) -> _WithPth:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.inner.__exit__(*exc)


cmdclass: dict[str, Any] = {"build_py": BuildPy}
try:
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheel(editable_wheel):  # type: ignore[misc,valid-type]
        def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
            return _WithPth(super()._select_strategy(*args, **kwargs))

    cmdclass["editable_wheel"] = EditableWheel
except ImportError:  # setuptools older than PEP 660 support: `pip install -e` uses setup.py develop
    pass

setup(
    cmdclass=cmdclass,
    ext_modules=[
        Extension(
            "rankscope.trace._ctrace",
            ["src/rankscope/trace/_ctrace.c"],
            optional=True,  # no compiler: the install still succeeds, the tracer runs in pure Python
            extra_compile_args=["-O2"],
        )
    ],
)

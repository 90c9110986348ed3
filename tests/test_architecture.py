"""The layering of docs/architecture.md, checked on the source: shared modules never import a room or the CLI.

Read with ast (nothing is imported), so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rankscope"
SHARED = (
    "model.py",
    "serial.py",
    "errors.py",
    "folding.py",
    "ranks.py",
    "procfs.py",
    "procs.py",
    "lifetime.py",
    "guardian.py",
    "passthrough.py",
)
ROOMS = (
    "rankscope.stacks",
    "rankscope.cluster",
    "rankscope.logs",
    "rankscope.cli",
    "rankscope.demo",
    "rankscope.net",
    "rankscope.doctor",
    "rankscope.launch",
    "rankscope.gputest",
    "rankscope.rerun",
    "rankscope.inspect",
    "rankscope.core",
    "rankscope.debug",
    "rankscope.numerics",
    "rankscope.fr",
    "rankscope.trace",
)
#: Modules imported inside training processes: standard library and these only (Python 3.9, no deps).
IN_PROCESS = (
    "ranks.py",
    "model.py",
    "serial.py",
    "procfs.py",
    *(f"debug/{m}.py" for m in ("debugger", "terminal", "remote", "rendezvous")),
    "trace/__init__.py",
    "trace/tracer.py",
    "trace/writer.py",
    "trace/format.py",
)


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def rankscope_imports(path: Path) -> set[str]:
    return {name for name in imports_of(path) if name == "rankscope" or name.startswith("rankscope.")}


@pytest.mark.parametrize(
    "name", [*SHARED, *(p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "inproc").glob("*.py"))]
)
def test_shared_modules_import_no_room(name: str) -> None:
    path = PACKAGE / name
    if not path.exists():
        pytest.skip(f"{name} is not a module any more")
    offending = sorted(n for n in rankscope_imports(path) if n.startswith(ROOMS))
    assert not offending, f"{name} imports {offending}: shared modules never import a room or cli/"


@pytest.mark.parametrize("name", IN_PROCESS)
def test_modules_imported_by_training_processes_need_only_the_standard_library(name: str) -> None:
    import sys

    third_party = sorted(
        n
        for n in imports_of(PACKAGE / name)
        if n.split(".")[0] not in sys.stdlib_module_names
        and n.split(".")[0] not in ("rankscope", "__future__")
    )
    assert not third_party, f"{name} imports {third_party}: it runs inside training processes"


def test_rooms_do_not_print_or_exit() -> None:
    """Only cli/ prints, exits and shows progress; rooms return data."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("cli/", "inproc/", "demo/")) or relative == "__main__.py":
            continue  # inproc wraps the job's own streams; demo jobs are the training scripts
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = ast.unparse(func)
                if name in (
                    "print",
                    "sys.exit",
                    "exit",
                    "sys.stdout.write",
                    "sys.stderr.write",
                    "click.echo",
                ):
                    offenders.append(f"{relative}:{node.lineno} {name}")
    assert not offenders, "library code prints or exits: " + ", ".join(offenders)

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
    "evidence.py",
    "jobkey.py",
    "cmdline.py",
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
    "trace/backend.py",
    "trace/hooks_c.py",
    "trace/hooks_py.py",
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


# --- the import table of docs/architecture.md ---------------------------------------------------

DOC = PACKAGE.parents[1] / "docs" / "architecture.md"


def _unit(path: Path) -> str:
    """The table's row a source file belongs to: ``stacks/`` for a room's module, ``model.py`` for a
    shared one."""
    relative = path.relative_to(PACKAGE)
    return f"{relative.parts[0]}/" if len(relative.parts) > 1 else relative.name


def _unit_of_module(name: str) -> str:
    parts = name.split(".")[1:]  # rankscope.stacks.merge -> stacks, merge
    if not parts:
        return "__init__.py"
    if (PACKAGE / parts[0]).is_dir():
        return f"{parts[0]}/"
    return f"{parts[0]}.py"


def import_table() -> tuple[dict[str, set[str]], set[str]]:
    """The ``may import`` column by row (``stacks/``, ``model.py``), and the shared modules named
    under the table. An entry is a room (``logs/``), a module (``model``, ``doctor.system``), or
    ``shared modules``; ``everything`` allows all; names in parentheses only say what is used."""
    import re

    text = DOC.read_text()
    shared_line = re.search(r"A shared module \(([^)]*)\)", text)
    assert shared_line, "docs/architecture.md names the shared modules under the table"
    shared = {f"{name}.py" for name in re.findall(r"`([a-z_]+)`", shared_line.group(1))}
    table: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        row = cells[0].strip("`")
        allowed: set[str] = set()
        column = re.sub(r"\([^()]*\)", "", cells[2])
        if "everything" in column:
            allowed.add("*")
        if "shared modules" in column:
            allowed |= shared
        for name in re.findall(r"`([^`]+)`", column):
            for each in name.split("/"):  # `doctor.system`/`doctor.checks`
                if each:
                    allowed.add(f"{each}/" if name.endswith("/") and "." not in each else each)
        table[row] = allowed
    return table, shared


def _allows(allowed: set[str], target: str) -> bool:
    """Does the row's column allow importing module ``target`` (``rankscope.doctor.system``)?"""
    parts = target.split(".")[1:]
    if "*" in allowed or not parts:
        return True
    names = {f"{parts[0]}/", f"{parts[0]}.py", *(".".join(parts[:n]) for n in range(1, len(parts) + 1))}
    return bool(names & allowed)


def module_imports(path: Path, typing_too: bool = True) -> set[str]:
    """The rankscope modules ``path`` imports: ``from rankscope.core import grab`` counts as
    ``rankscope.core.grab`` (``from rankscope.trace import _ctrace`` as the C extension built from
    ``_ctrace.c``); imports under ``if TYPE_CHECKING:`` count too (they are the same dependency, only
    later), unless ``typing_too`` is False (they never run)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = set()
    if not typing_too:
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for statement in node.body
            for inner in ast.walk(statement)
        }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("rankscope"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("rankscope"):
                continue
            base = PACKAGE.parent.joinpath(*node.module.split("."))
            for alias in node.names:
                sub = base / alias.name
                is_module = sub.is_dir() or any(sub.with_suffix(s).exists() for s in (".py", ".c"))
                names.add(f"{node.module}.{alias.name}" if is_module else node.module)
    return names


def test_every_module_has_a_row_in_the_import_table() -> None:
    table, _shared = import_table()
    units = {_unit(path) for path in PACKAGE.rglob("*.py")}
    missing = sorted(units - set(table))
    assert not missing, f"docs/architecture.md has no row for {missing}"


def test_imports_between_rooms_follow_the_table() -> None:
    """Each room and shared module imports only what its row's ``may import`` column names."""
    table, _shared = import_table()
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        allowed = table.get(unit, set())
        for target in sorted(module_imports(path)):
            if _unit_of_module(target) == unit or _allows(allowed, target):
                continue
            offending.append(f"{path.relative_to(PACKAGE)} imports {target} (row {unit}: {sorted(allowed)})")
    assert not offending, "imports the table does not allow:\n" + "\n".join(offending)


#: The modules that start processes themselves, each for the reason at its top; everything else goes
#: through rankscope.lifetime (start/run/start_detached).
STARTS_PROCESSES = {
    "lifetime.py": "the process-lifetime API itself, and the guardian it spawns",
    "stacks/runner.py": "one py-spy per rank from one poll loop, posix_spawn (subprocess costs more than the dumps)",
}
_STARTERS = {
    "subprocess.Popen",
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "os.posix_spawn",
    "os.posix_spawnp",
    "os.fork",
    "os.system",
    "os.popen",
}


def test_processes_are_started_through_lifetime() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in STARTS_PROCESSES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in _STARTERS:
                offenders.append(f"{relative}:{node.lineno} {ast.unparse(node.func)}")
    assert not offenders, "start it with rankscope.lifetime (start/run/start_detached): " + ", ".join(
        offenders
    )


# --- no import cycles at run time -----------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles() -> list[list[str]]:
    """Every set of modules that import each other, directly or around a circle (Tarjan's strongly
    connected components of the run-time import graph: a lazy import inside a function counts, one
    under ``if TYPE_CHECKING:`` does not)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {
        name: sorted(module_imports(path, typing_too=False) & modules.keys() - {name})
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(cycles)


#: Cycles not broken yet, each with what holds it; a new one fails the test below.
KNOWN_CYCLES: list[list[str]] = []


def test_no_module_imports_itself_around_a_circle() -> None:
    new = [cycle for cycle in import_cycles() if cycle not in KNOWN_CYCLES]
    assert not new, "modules that import each other at run time: " + "; ".join(" <-> ".join(c) for c in new)


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "rankscope"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "a.py").write_text("def f():\n    from rankscope.room import b, c\n")
    (package / "room" / "b.py").write_text("from rankscope.room.a import f\n")
    (package / "room" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rankscope.room import a\n"
    )
    monkeypatch.setitem(globals(), "PACKAGE", package)  # a lazy a -> b -> a; c -> a only for types
    assert import_cycles() == [["rankscope.room.a", "rankscope.room.b"]]

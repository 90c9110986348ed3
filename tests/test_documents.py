"""Every JSON document a command prints is declared one way and goes through rankscope.serial.

A document is a dataclass whose class names its schema (``SCHEMA: ClassVar[str] = "rankscope.NAME/V"``)
and is written by ``serial.dump_document`` / read by ``serial.load_document``. The source is read with
ast to find every document class and every other way of naming a schema (a module constant, a dict
built by hand with a ``"schema"`` key); then each class is imported and read through serial.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rankscope"
TAG = re.compile(r"rankscope\.[a-z_.]+/\d+")


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("rankscope", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        out.append((name, ast.parse(path.read_text(), str(path))))
    return out


MODULES = _modules()


def _names_a_schema(node: ast.expr) -> bool:
    """A string (or f-string) that is a whole schema tag: ``"rankscope.fr/1"``, ``f"rankscope.fr/{V}"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return TAG.fullmatch(node.value) is not None
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        return (
            isinstance(first, ast.Constant)
            and str(first.value).startswith("rankscope.")
            and "/" in str(first.value)
        )
    return False


def _document_classes() -> dict[str, tuple[str, str]]:
    """Schema tag (an f-string's as written) -> (module, class) of every ``SCHEMA`` class attribute."""
    found: dict[str, tuple[str, str]] = {}
    for module, tree in MODULES:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == "SCHEMA":
                    if item.value is None:  # a Protocol saying what a document has
                        continue
                    assert _names_a_schema(item.value), f"{module}.{node.name}"
                    tag = ast.unparse(item.value)
                    assert tag not in found, (
                        f"{tag} is the schema of {found[tag]} and of {module}.{node.name}"
                    )
                    found[tag] = (module, node.name)
    return found


DOCUMENTS = _document_classes()


def test_documents_are_found() -> None:
    # One per document a command prints; a room that adds one adds a class here, not a constant.
    assert len(DOCUMENTS) >= 30, sorted(DOCUMENTS)
    assert {module.split(".")[1] for module, _ in DOCUMENTS.values()} >= {
        "stacks", "fr", "why", "logs", "trace", "net", "core", "gputest", "numerics", "inspect",
        "cluster", "launch", "doctor", "rerun",
    }  # fmt: skip
    assert not [
        module for module, _ in DOCUMENTS.values() if module.startswith("rankscope.cli")
    ]  # rooms own them


def test_a_schema_is_named_only_by_its_document_class() -> None:
    """No module-level schema constants and no documents built by hand as dicts."""
    stray = []
    for module, tree in MODULES:
        for node in tree.body:
            constant = isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
            if constant and _names_a_schema(node.value):  # type: ignore[union-attr,arg-type]
                stray.append(f"{module}:{node.lineno} module constant {ast.unparse(node)}")
        if module == "rankscope.serial":  # dump_document puts the class's tag first
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.Assign) and _names_a_schema(item.value):
                        stray.append(
                            f"{module}:{item.lineno} {node.name} names it without SCHEMA: ClassVar[str]"
                        )
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                if "schema" in keys:
                    stray.append(f"{module}:{node.lineno} a document built by hand")
            store = isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
            if store and ast.unparse(node.slice) == "'schema'":  # type: ignore[attr-defined]
                stray.append(f"{module}:{node.lineno} a schema set by hand")
    assert not stray, "\n".join(stray)


def test_every_schema_users_read_of_is_a_document_class() -> None:
    """The tags docs/ and --help name are the classes' (a newer version, as docs/stacks.md's error
    example has, reads as its name)."""
    names = {TAG.fullmatch(tag.strip("\"'f")) and tag.strip("\"'f").rsplit("/", 1)[0] for tag in DOCUMENTS}
    names |= {tag.strip("\"'f").split("/{")[0] for tag in DOCUMENTS if "/{" in tag}
    said = set()
    for path in [
        *ROOT.joinpath("docs").rglob("*.md"),
        ROOT / "README.md",
        *PACKAGE.joinpath("cli").glob("*.py"),
    ]:
        said |= {tag.rsplit("/", 1)[0] for tag in TAG.findall(path.read_text())}
    assert said - names == set()


@pytest.mark.parametrize("tag", sorted(DOCUMENTS), ids=lambda tag: tag.strip("\"'f"))
def test_every_document_class_goes_through_serial(tag: str) -> None:
    from rankscope.serial import dump_document, load_document

    module, name = DOCUMENTS[tag]
    cls: Any = getattr(importlib.import_module(module), name)
    assert dataclasses.is_dataclass(cls), f"{module}.{name} is a document, so a dataclass"
    assert TAG.fullmatch(cls.SCHEMA) and cls.SCHEMA not in {f.name for f in dataclasses.fields(cls)}
    # The loader reads the class's annotations and checks the tag: a document of another kind is refused,
    # one of this kind is read (or names the first field it misses).
    with pytest.raises(ValueError, match="not a rankscope"):
        load_document(cls, {"schema": "rankscope.other/1"})
    try:
        document = load_document(cls, {"schema": cls.SCHEMA})
    except ValueError as exc:
        assert "missing field" in str(exc)
    else:
        assert dump_document(document)["schema"] == cls.SCHEMA

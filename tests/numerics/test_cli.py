"""`rankscope numerics demo` for real on this CPU-only machine: text, --json, and torch missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import CliResult, run_cli, run_cli_here


def test_demo_compares_float32_and_float64_here_and_its_json_parses() -> None:
    pytest.importorskip("torch")  # only this test needs it: the next one runs where torch is missing
    text = run_cli("numerics", "demo")
    assert text.returncode == 0, text.stderr
    assert "devices here: cpu" in text.stdout
    assert "== 10 ** (arange(0, 10) / 10), float32 vs float64\n" in text.stdout
    assert "MISMATCH, 9 of 10 elements (90.0%) outside exact (rtol=0, atol=0)" in text.stdout
    assert "every module's output is within tolerance" in text.stdout
    document = run_cli("numerics", "demo", "--json")
    assert document.returncode == 0, document.stderr
    data = document.json()
    assert data["schema"] == "rankscope.numerics.demo/1" and data["ok"] is True and data["devices"] == ["cpu"]
    exact = data["cases"][1]["comparison"]
    assert (exact["mismatched"], exact["total"], exact["worst_index"]) == (9, 10, [6])
    block = data["cases"][2]["modules"]
    assert block["first_divergent"] is None and block["rows"][0]["type"] == "Block"
    assert "Infinity" not in document.stdout and "NaN" not in document.stdout


def test_demo_without_torch_is_one_line_and_the_missing_tool_code() -> None:
    code = "import sys; sys.modules['torch'] = None\nfrom rankscope.cli.main import main\nmain(['numerics', 'demo'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 6
    assert (
        out.stderr.startswith("rankscope: error: torch cannot be imported in ")
        and "pip install torch" in out.stderr
    )
    assert out.stderr.count("\n") == 1 and out.stdout == ""


#: The user's own file of model factories, as `numerics compare MODULE:FACTORY` loads it.
USER_MODELS = """
import torch
from torch import nn


class Offset(nn.Module):
    def forward(self, x):
        return (x + 1000) - 1000          # bfloat16 holds values near 1000 to 4 only


class Float32Buffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.proj = torch.ones(8, 8, dtype=torch.float32)   # float32 whatever the default dtype

    def forward(self, x):
        return self.embed(x) @ self.proj


def plain():
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4))


def planted():
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), Offset(), nn.Linear(8, 4))


def mixed():
    return Float32Buffer()


def broken():
    raise RuntimeError("no checkpoint at /models/step-100")


def batch():
    return torch.randn(4, 8)


def pair():
    return (torch.randn(4, 8),)
"""


def _compare(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`rankscope numerics compare ARGS` run from ``cwd``, where the user's models file is."""
    return subprocess.run(
        [sys.executable, "-m", "rankscope", "numerics", "compare", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _compare_here(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> CliResult:
    """The same command in this process (torch imported once per worker, not per case): from ``cwd``,
    with the module path and the user's module as they were before, since the command adds them."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "user_models", raising=False)
    try:
        return run_cli_here("numerics", "compare", *args)
    finally:
        sys.modules.pop("user_models", None)


@pytest.fixture
def user_models(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    (tmp_path / "user_models.py").write_text(USER_MODELS)
    return tmp_path


def test_compare_names_the_layer_where_bfloat16_diverges(user_models: Path) -> None:
    text = _compare(
        user_models, "user_models:planted", "--inputs", "user_models:batch", "--dtypes", "float32,bfloat16"
    )
    assert text.returncode == 20, text.stderr  # NUMERICS_MISMATCH
    assert text.stdout.startswith("cpu float32 (reference) vs cpu bfloat16, the dtype's noise:")
    (row,) = [line for line in text.stdout.splitlines() if line.strip().startswith("2 ")]
    assert "Offset" in row and row.endswith("DIVERGES (starts here)")
    assert "first divergent module: 2 (its inputs agree: the divergence starts in it)" in text.stdout
    # the same by file path, as JSON, the inputs as a tuple of one
    doc = _compare(
        user_models,
        "user_models.py:planted",
        "--inputs",
        "user_models.py:pair",
        "--dtypes",
        "float32,bfloat16",
        "--json",
    )
    assert doc.returncode == 20, doc.stderr
    data = json.loads(doc.stdout)
    assert data["schema"] == "rankscope.numerics.compare/1" and data["ok"] is False
    assert data["first_divergent"] == "2" and data["first_introduced"] == "2"
    assert [row["name"] for row in data["rows"]] == ["", "0", "1", "2", "3"]
    assert "Infinity" not in doc.stdout and "NaN" not in doc.stdout


def test_compare_agrees_on_a_plain_model(user_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _compare_here(
        user_models,
        monkeypatch,
        "user_models:plain",
        "--inputs",
        "user_models:batch",
        "--dtypes",
        "float32,float64",
    )
    assert text.returncode == 0, text.stderr
    assert "every module's output is within tolerance" in text.stdout


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("user_models:mixed", "--inputs", "user_models:batch", "--dtypes", "float32,bfloat16"), 8,
         "rankscope: error: the other side (cpu bfloat16) raised in the model's forward (Float32Buffer): "
         "RuntimeError: expected m1 and m2 to have the same dtype"),
        (("user_models:broken", "--dtypes", "float32,float64"), 8,
         "the reference side (cpu float32) raised while building the model: RuntimeError: no checkpoint at "
         "/models/step-100 (at "),
        (("user_models:plain", "--inputs", "user_models:batch", "--devices", "cpu,cuda:99"), 8,
         "device 'cuda:99' is not available"),
        (("user_models:plain", "--dtypes", "float33,float64"), 2, "'float33' is not a torch dtype"),
        (("user_models:plain", "--dtypes", "float32,float64", "--rtol", "0"), 2, "give both rtol and atol"),
        (("user_models", "--dtypes", "float32,float64"), 2, "is not MODULE:FACTORY"),
    ],
)  # fmt: skip
def test_compare_errors_are_one_line_with_their_exit_code(
    user_models: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], code: int, words: str
) -> None:
    out = _compare_here(user_models, monkeypatch, *args)
    assert out.returncode == code, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr
    assert "dtypes=(" not in out.stderr  # a hint in the command's options, not in Python
    assert len(out.stderr.strip().splitlines()) == 1 if code == 8 else "Usage:" in out.stderr


def test_factories_that_cannot_be_loaded_name_what_was_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankscope.errors import BadInputError
    from rankscope.numerics.factory import load_factory, parse_spec

    (tmp_path / "raises_on_import.py").write_text("import math\nSCALE = 1 / 0\n")
    (tmp_path / "fine.py").write_text("def make():\n    return 1\n\nNOT_A_FUNCTION = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_factory(parse_spec("fine:make"))() == 1
    assert load_factory(parse_spec(str(tmp_path / "fine.py") + ":make"))() == 1
    for spec, words in (
        ("no_such_module:make", "no_such_module:make: no module named 'no_such_module'"),
        ("fine:missing", "fine:missing: fine has no 'missing'"),
        ("fine:NOT_A_FUNCTION", "fine:NOT_A_FUNCTION: NOT_A_FUNCTION is a int, not a function"),
        (
            "raises_on_import:make",
            "importing raises_on_import raised ZeroDivisionError: division by zero (at ",
        ),
        ("nowhere/models.py:make", "no such file nowhere/models.py"),
    ):
        with pytest.raises(BadInputError) as caught:
            load_factory(parse_spec(spec))
        assert words in caught.value.message and "\n" not in caught.value.message


def test_compare_without_torch_is_one_line_and_the_missing_tool_code(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\nfrom rankscope.cli.main import main\n"
        "main(['numerics', 'compare', 'models:make', '--dtypes', 'float32,float64'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 6, out.stderr
    assert (
        out.stderr.startswith("rankscope: error: torch cannot be imported in ")
        and out.stderr.count("\n") == 1
    )

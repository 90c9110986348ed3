"""`rankscope numerics demo` for real on this CPU-only machine: text, --json, and torch missing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.support.cli import run_cli


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

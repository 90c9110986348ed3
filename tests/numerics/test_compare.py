"""compare() with real torch on the CPU: two dtypes of 10 ** (arange(0, 10) / 10), exact mode,
nested outputs, and the refusal of a device that does not exist here (CUDA is really absent)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rankscope.numerics import DeviceUnavailableError, compare  # noqa: E402


def powers(x: object = None) -> object:
    return 10 ** (torch.arange(0, 10) / 10)


def test_float32_against_float64_of_powers_of_ten() -> None:
    result = compare(powers, dtypes=(torch.float32, torch.float64))
    # what a user sees: every value agrees within float32's default tolerance ...
    assert result.ok and result.mismatched == 0 and result.total == 10
    assert (result.reference.label, result.other.label) == ("cpu float32", "cpu float64")
    # ... but the float32 values are not the float64 ones: 3.981071949 vs 3.981071706 at index 6
    expected = (10 ** (torch.arange(0, 10, dtype=torch.float64) / 10)).tolist()
    single = (10 ** (torch.arange(0, 10, dtype=torch.float32) / 10)).double().tolist()
    diffs = [abs(a - b) for a, b in zip(single, expected)]
    assert result.max_abs_diff == pytest.approx(max(diffs))
    assert result.worst_index == (diffs.index(max(diffs)),) == (6,)
    assert 1e-7 < result.max_abs_diff < 1e-6
    assert result.worst_values == pytest.approx((single[6], expected[6]), rel=0, abs=0)
    assert result.leaves[0].rtol == 1.3e-6 and result.leaves[0].atol == 1e-5  # float32's, the looser
    text = str(result)
    assert text.startswith("cpu float32 (reference) vs cpu float64: ok, 0 of 10 elements")
    assert "at index (6,): 3.981071949 (cpu float32) vs 3.981071706 (cpu float64)" in text


def test_exact_mode_counts_every_rounded_value() -> None:
    result = compare(powers, dtypes=(torch.float32, torch.float64), rtol=0, atol=0)
    assert not result.ok
    # 10 ** 0 == 1 is exact in both; the other nine round differently in float32
    assert result.mismatched == 9 and result.total == 10
    assert "MISMATCH, 9 of 10 elements (90.0%) outside exact (rtol=0, atol=0)" in str(result)
    same = compare(lambda x: x * 2, torch.arange(10.0), dtypes=(torch.float32, torch.float64), rtol=0, atol=0)
    assert same.ok and same.max_abs_diff == 0 and "every element equal" in str(same)


def test_inputs_are_cast_and_tolerances_come_from_both_dtypes() -> None:
    x = torch.linspace(-3, 3, 50)
    result = compare(torch.exp, x, dtypes=(torch.float16, torch.float32))
    leaf = result.leaves[0]
    assert leaf.dtypes == ("float16", "float32") and (leaf.rtol, leaf.atol) == (1e-3, 1e-5)
    assert result.ok
    tight = compare(torch.exp, x, dtypes=(torch.float16, torch.float32), rtol=1e-6, atol=0)
    assert tight.mismatched > 40


def test_nested_outputs_are_compared_leaf_by_leaf_with_their_path() -> None:
    def fn(x: object) -> object:
        assert isinstance(x, torch.Tensor)
        planted = x.clone()
        if x.dtype == torch.float64:
            planted[2, 3] += 1.0  # one element far off on one side only
        return {"sum": x.sum(), "pair": (x * 3, planted), "steps": 7}

    result = compare(fn, torch.randn(4, 5), dtypes=(torch.float32, torch.float64))
    paths = [leaf.path for leaf in result.leaves]
    assert paths == ["['sum']", "['pair'][0]", "['pair'][1]", "['steps']"]
    assert not result.ok and result.mismatched == 1 and result.total == 1 + 20 + 20 + 1
    assert result.worst_path == "['pair'][1]" and result.worst_index == (2, 3)
    assert result.max_abs_diff == pytest.approx(1.0)
    assert "output['pair'][1]: MISMATCH, 1 of 20 elements" in str(result)


def test_shapes_that_differ_and_nan_are_mismatches() -> None:
    shapes = compare(
        lambda x: x[:3] if x.dtype == torch.float64 else x,
        torch.ones(4),
        dtypes=(torch.float32, torch.float64),
    )
    assert not shapes.ok and shapes.leaves[0].problem == "shape (4,) vs (3,)"
    nan = torch.tensor([1.0, float("nan"), float("inf")])
    against_a_number = compare(
        lambda x: x if x.dtype == torch.float32 else torch.where(x.isnan(), 0.0, x),
        nan,
        dtypes=(torch.float32, torch.float64),
    )
    assert against_a_number.max_abs_diff == against_a_number.max_rel_diff == float("inf")  # not NaN
    assert against_a_number.worst_index == (1,) and against_a_number.mismatched == 1
    assert not compare(
        lambda x: x, nan, dtypes=(torch.float32, torch.float64)
    ).ok  # NaN != NaN, as assert_close
    assert compare(lambda x: x, nan, dtypes=(torch.float32, torch.float64), equal_nan=True).ok


def test_one_tolerance_alone_is_refused() -> None:
    with pytest.raises(ValueError, match="give both rtol and atol"):
        compare(powers, dtypes=(torch.float32, torch.float64), rtol=0)


def test_a_device_that_does_not_exist_here_names_the_ones_that_do() -> None:
    assert not torch.cuda.is_available()  # this machine has no GPU: the message below is the real one
    with pytest.raises(DeviceUnavailableError) as caught:
        compare(powers, devices=("cpu", "cuda"))
    line = caught.value.one_line()
    assert "device 'cuda' is not available" in line
    assert "devices here: cpu" in line and "dtypes=(torch.float32, torch.float64)" in line
    with pytest.raises(DeviceUnavailableError, match="not a device torch knows"):
        compare(powers, devices=("cpu", "gpu"))
    with pytest.raises(ValueError, match="nothing to compare"):
        compare(powers, devices="cpu")


def test_the_package_imports_without_torch_and_says_so_once_used(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    code = (
        "import sys; sys.modules['torch'] = None\n"  # torch made unimportable
        "import rankscope.numerics as n\n"
        "try:\n    n.compare(lambda: 1, dtypes=(1, 2))\n"
        "except ImportError as exc:\n    print(exc.exit_code.value, exc.one_line())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(src)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    code_value, line = out.stdout.split(" ", 1)
    assert (
        code_value == "6" and line.startswith("torch cannot be imported in") and "pip install torch" in line
    )


def test_python_numbers_and_integers_are_judged_as_assert_close_judges_them() -> None:
    f32, f64 = torch.float32, torch.float64

    def item(x: torch.Tensor) -> float:  # a Python float: float32's 1 + eps against float64's 1 + eps
        return (x + torch.finfo(x.dtype).eps).item()

    one = torch.ones(())
    torch.testing.assert_close(item(one), item(one.double()))  # within float64's tolerance: it passes
    floats = compare(item, one, dtypes=(f32, f64))
    assert floats.ok and floats.leaves[0].dtypes == ("float64", "float64"), floats
    assert floats.max_abs_diff == pytest.approx(torch.finfo(f32).eps - torch.finfo(f64).eps, rel=1e-9)
    far = compare(lambda x: float(x.sum()) + (1e-3 if x.dtype == f64 else 0.0), one, dtypes=(f32, f64))
    assert not far.ok and far.max_abs_diff == pytest.approx(1e-3)

    counts = torch.tensor([10, 20])
    torch.testing.assert_close(counts, counts + 1, rtol=0, atol=1)
    off_by_one = compare(lambda x, n: n + (x.dtype == f64), one, counts, dtypes=(f32, f64), rtol=0, atol=1)
    assert off_by_one.ok and off_by_one.max_abs_diff == 1
    assert not compare(lambda x, n: n + (x.dtype == f64), one, counts, dtypes=(f32, f64)).ok  # exact
    huge = compare(lambda x: 2**70, one, dtypes=(f32, f64))  # beyond int64: a plain value, no error
    assert huge.ok


def test_numpy_outputs_are_compared_as_tensors() -> None:
    def as_numpy(x: torch.Tensor) -> object:
        return {"array": (x * 3).numpy(), "scalar": (x * 3).numpy()[1]}

    x = torch.tensor([1.0, 1 / 3, 7.0])
    result = compare(as_numpy, x, dtypes=(torch.float32, torch.float64))
    assert result.ok and [leaf.dtypes for leaf in result.leaves] == [("float32", "float64")] * 2
    assert result.leaves[0].shape == (3,) and result.max_abs_diff > 0
    exact = compare(as_numpy, x, dtypes=(torch.float32, torch.float64), rtol=0, atol=0)
    assert exact.mismatched == 2 and exact.worst_path == "['array']" and exact.worst_index == (1,)


def test_a_comparison_leaves_the_callers_random_stream_where_it_was() -> None:
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    compare(lambda: torch.rand(2), dtypes=(torch.float32, torch.float64))  # seeds its sides with seed=0
    assert torch.equal(torch.rand(3), expected)

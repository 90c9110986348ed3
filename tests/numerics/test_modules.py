"""compare_modules with real torch on the CPU. Only the CPU exists here, so a device difference is
simulated with two dtypes: the sides differ the way a CUDA build would (another default dtype while
the model is built, other rounding in the forward pass)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.numerics.models import Stack  # noqa: E402

from rankscope.numerics import compare_modules  # noqa: E402


def test_a_buffer_computed_at_construction_in_another_dtype_is_reported() -> None:
    # 2048 positions: the buffer's error (2e-4) times the position outgrows bfloat16's own rounding
    x = torch.randn(2, 2048, 16, generator=torch.Generator().manual_seed(1))
    # bfloat16 side: inv_freq is computed in bfloat16 and kept as float32; the reference computes it in float32
    result = compare_modules(Stack, x, dtypes=(torch.float32, torch.bfloat16))
    assert [item.name for item in result.buffer_mismatches] == ["rotary.inv_freq"]
    buffer = result.buffer_mismatches[0].diff
    assert buffer.dtypes == ("float32", "float32") and buffer.max_rel_diff > 1e-4
    assert "rotary.inv_freq: " in str(result) and "buffers that differ" in str(result)
    assert not result.ok
    # it is not persistent: it stays as each side built it, and the rotary is where the outputs part
    assert "rotary.inv_freq" not in result.copied and "head.weight" in result.copied
    assert result.first_divergent == result.first_introduced == "rotary"
    # rounding alone (float64 rounded to float32) stays within tolerance: no buffer reported
    assert compare_modules(Stack, x, dtypes=(torch.float32, torch.float64)).buffer_mismatches == ()


def test_the_first_divergent_layer_is_named() -> None:
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(2))
    result = compare_modules(lambda: Stack(cancel_in=2), x, dtypes=(torch.float32, torch.float64))
    rows = {row.name: row for row in result.rows}
    assert result.first_divergent == "blocks.2" and result.first_introduced == "blocks.2"
    # its children agree: the divergence is in the block's own code; what follows inherits it
    assert rows["blocks.2.fc"].ok and rows["blocks.2.norm"].ok and rows["blocks.1"].ok
    assert rows["blocks.2"].starts_here and not rows["blocks.2"].ok
    assert (
        not rows["blocks.3"].ok and rows["blocks.3"].inputs_ok is False and not rows["blocks.3"].starts_here
    )
    assert not rows[""].starts_here  # the model's inputs agree too, but the start is inside blocks.2
    assert not result.output.ok
    # float64 draws other random numbers: every Linear differs after construction, then is copied
    assert {item.name for item in result.param_mismatches} >= {"blocks.0.fc.weight", "head.bias"}
    assert any("random initialisation is not the same on both sides" in note for note in result.notes)
    text = str(result)
    assert "first divergent module: blocks.2 (its inputs agree: the divergence starts in it)" in text
    assert [row.name for row in result.rows][:4] == ["", "rotary", "blocks.0", "blocks.0.norm"]  # call order


def test_without_a_planted_divergence_every_layer_agrees() -> None:
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
    result = compare_modules(Stack, x, dtypes=(torch.float32, torch.float64))
    assert result.first_divergent is None and result.ok
    assert "every module's output is within tolerance" in str(result)
    exact = compare_modules(Stack, x, dtypes=(torch.float32, torch.float64), rtol=0, atol=0)
    assert exact.first_divergent == "rotary"  # bit for bit, the first layer already differs


def test_a_side_that_raises_is_one_line_naming_the_side_and_the_module() -> None:
    from tests.numerics.models import Float32Buffer

    from rankscope.numerics import SideRaisedError

    x = torch.randn(2, 8)
    with pytest.raises(SideRaisedError) as raised:
        compare_modules(Float32Buffer, x, dtypes=(torch.float32, torch.bfloat16))
    message = str(raised.value)
    assert "\n" not in message, message
    assert message.startswith(
        "the other side (cpu bfloat16) raised in module 'mix.1' (Mixer): RuntimeError: "
    )
    assert "models.py:" in message and "in forward" in message  # the user's own line
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # not the torch traceback
    assert isinstance(raised.value.original, RuntimeError)


def test_a_factory_that_raises_is_named_with_its_side() -> None:
    from rankscope.numerics import SideRaisedError

    def factory() -> torch.nn.Module:
        if torch.get_default_dtype() == torch.float64:
            raise ValueError("no float64 here\nsecond line")
        return torch.nn.Linear(2, 2)

    with pytest.raises(SideRaisedError) as raised:
        compare_modules(factory, torch.ones(1, 2), dtypes=(torch.float32, torch.float64))
    assert str(raised.value).startswith(
        "the other side (cpu float64) raised while building the model: ValueError: no float64 here"
    ), str(raised.value)
    assert "second line" not in str(raised.value)


def test_at_bfloat16_rounding_is_noise_and_the_layer_that_loses_precision_is_named() -> None:
    from tests.numerics.models import blocks

    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(4))
    plain = compare_modules(blocks, x, dtypes=(torch.float32, torch.bfloat16))
    # bfloat16 rounds every layer's output by about its epsilon (2**-7): that is no divergence
    assert plain.first_divergent is None and plain.ok, str(plain)
    assert "bfloat16's epsilon" in str(plain)
    planted = compare_modules(lambda: blocks(offset_at=2), x, dtypes=(torch.float32, torch.bfloat16))
    assert planted.first_introduced == "2", str(planted)
    assert all(row.ok for row in planted.rows if row.name in ("0", "1"))
    # the caller's own tolerances still rule
    assert not compare_modules(blocks, x, dtypes=(torch.float32, torch.bfloat16), rtol=0, atol=0).ok

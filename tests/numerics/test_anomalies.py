"""The inf/NaN detector with real torch: a planted overflow in forward, a NaN born in backward."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from tests.numerics.models import Stack  # noqa: E402
from torch import nn  # noqa: E402

from rankscope.numerics import AnomalyError, detect_anomalies  # noqa: E402


class Length(nn.Module):
    """sqrt(sum(x^2)): 0 at a zero vector in forward, NaN (0 * inf) in its gradient there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x * x).sum(-1, keepdim=True))


def overflowing_stack() -> nn.Module:
    torch.manual_seed(0)
    model = Stack()
    with torch.no_grad():
        model.blocks[2].fc.weight.fill_(1e38)  # 16 inputs of order 1 times 1e38: beyond float32's 3.4e38
    return model


def test_a_forward_overflow_is_raised_at_the_module_that_produced_it() -> None:
    model = overflowing_stack()
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(AnomalyError) as caught, detect_anomalies(model, history=3):
        model(x)
    anomaly = caught.value.anomaly
    assert (anomaly.name, anomaly.type, anomaly.phase, anomaly.kind) == (
        "blocks.2.fc",
        "Linear",
        "forward",
        "inf",
    )
    assert not anomaly.entered and anomaly.pass_index == 1
    assert [step.name for step in anomaly.history] == ["blocks.1", "blocks.2.norm", "blocks.2.fc"]
    culprit = anomaly.history[-1]
    assert culprit.params.abs_max == pytest.approx(1e38) and culprit.inputs.nonfinite == 0
    assert culprit.outputs.nonfinite > 0 and anomaly.history[-2].outputs.abs_max < 10
    assert str(caught.value).startswith("inf first in the output of blocks.2.fc (Linear), forward pass 1")
    # tanh turns inf back into 1: the model's output is finite, only the detector saw the overflow
    assert torch.isfinite(model(x)).all()
    assert not any(module._forward_hooks or module._backward_hooks for module in model.modules())


def test_a_nan_born_in_backward_is_recorded_with_its_module() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(Length()), nn.Linear(1, 2))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every ReLU output 0: Length sees zero vectors
    x = torch.randn(3, 4)
    with detect_anomalies(model, history=4, on_anomaly="record") as detector:
        for _ in range(2):
            out = model(x)
            out.sum().backward()
        assert detector.forward_anomaly is None  # forward is clean: sqrt(0) = 0
    anomaly = detector.backward_anomaly
    assert anomaly is not None and detector.anomaly is anomaly
    assert (anomaly.name, anomaly.type, anomaly.phase, anomaly.kind) == ("2.0", "Length", "backward", "NaN")
    assert anomaly.pass_index == 1 and not anomaly.entered
    assert anomaly.history[-1].inputs.nonfinite == 0  # the gradient it received was finite
    assert "NaN first in the gradient for its inputs of 2.0 (Length), backward of forward pass 1" in str(
        anomaly
    )
    assert detector.passes == 2


def test_nothing_is_reported_for_a_clean_model_and_inputs_that_already_hold_nan() -> None:
    model = Stack()
    x = torch.randn(2, 8, 16)
    with detect_anomalies(model) as detector:
        model(x).sum().backward()
    assert detector.anomaly is None
    x[0, 0, 0] = float("nan")
    with detect_anomalies(model, on_anomaly="record") as detector:
        model(x)
    assert detector.anomaly is not None
    assert detector.anomaly.name == "rotary" and detector.anomaly.entered  # it came in with the input


def test_a_detector_that_cannot_be_set_up_leaves_no_hook_behind() -> None:
    model = overflowing_stack()
    model.head.register_backward_hook(lambda *args: None)  # torch refuses a full backward hook beside it
    with pytest.raises(RuntimeError, match="regular backward hooks and full backward hooks"):
        detect_anomalies(model)
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # (torch warns about the old-style hook when a forward records gradients)
        model(x)  # the overflow in blocks.2 raises nothing: no hook of the failed detector is left
    assert not any(module._forward_hooks for module in model.modules())


class Boost(nn.Module):
    """Scales its input in place: the inf it makes is in its input tensor too, afterwards."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(1e30)


def test_an_inf_made_in_place_is_produced_by_that_module_not_entered() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Boost(), nn.Linear(4, 4))
    with torch.no_grad():
        model[0].weight.fill_(1e10)
        with detect_anomalies(model, on_anomaly="record", backward=False) as detector:
            model(torch.ones(2, 4))
    assert detector.anomaly is not None and detector.anomaly.name == "1"
    assert not detector.anomaly.entered
    assert "its inputs already held" not in str(detector.anomaly)


def test_the_detector_leaves_the_processs_warning_filters_as_it_found_them() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    before = list(warnings.filters)
    with detect_anomalies(model):
        model(torch.randn(2, 4)).sum().backward()  # its input needs no gradient: torch's warning, silenced
    assert warnings.filters == before

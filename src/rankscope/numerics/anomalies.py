"""Where inf and NaN first appear: forward and backward hooks on every module of a model (torch).

Cheap while nothing is wrong: each module call costs one reduction per floating output (a sum is
finite only when every element is; the element-wise test runs only when it is not) and an append
to a bounded history that holds references, not copies. Statistics (abs min/max of inputs,
parameters and outputs) are computed only for the history, once an anomaly is found.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Optional

from rankscope.numerics.report import Anomaly, ModuleStep, TensorStats
from rankscope.numerics.torchload import load_torch
from rankscope.numerics.tree import flatten


class AnomalyError(RuntimeError):
    """Raised (in ``raise`` mode) where the first inf/NaN is found; ``.anomaly`` has the details."""

    def __init__(self, anomaly: Anomaly) -> None:
        super().__init__(str(anomaly))
        self.anomaly = anomaly


class _Call:
    """A watched call: references to its tensors (statistics come later, only if needed)."""

    __slots__ = ("inputs", "module", "name", "outputs", "phase")

    def __init__(self, name: str, module: Any, phase: str, inputs: Any, outputs: Any) -> None:
        self.name = name
        self.module = module
        self.phase = phase
        self.inputs = inputs
        self.outputs = outputs


class AnomalyDetector:
    """Watches ``model`` from construction until :meth:`close` (or the end of a ``with`` block).

    ``on_anomaly="raise"`` raises :class:`AnomalyError` from the forward pass (or ``backward()``)
    at the first module producing inf/NaN; ``"record"`` keeps the first of each phase in
    :attr:`forward_anomaly` / :attr:`backward_anomaly` (:attr:`anomaly`: the first of the two) and
    lets the run go on. ``history``: how many module calls are kept to show before it.
    ``backward=False`` skips the backward hooks (they wrap each module's inputs and outputs, which
    a module that then modifies its output in place does not allow).
    """

    def __init__(
        self, model: Any, history: int = 8, on_anomaly: str = "raise", backward: bool = True
    ) -> None:
        if on_anomaly not in ("raise", "record"):
            raise ValueError(f"on_anomaly is 'raise' or 'record', not {on_anomaly!r}")
        if history < 1:
            raise ValueError("history keeps at least the culprit: history >= 1")
        self._torch = load_torch()
        self.raise_error = on_anomaly == "raise"
        self.forward_anomaly: Optional[Anomaly] = None
        self.backward_anomaly: Optional[Anomaly] = None
        self.passes = 0
        self._forward: deque[_Call] = deque(maxlen=history)
        self._backward: deque[_Call] = deque(maxlen=history)
        self._root = model
        # A model whose input needs no gradient makes torch warn at every backward that the root's hook
        # fires early; that is expected here, and the hook handles it (no input gradient to check).
        # The filter is removed again by close(): the process's warnings are its own afterwards.
        self._filter: Optional[Any] = None
        if backward:
            warnings.filterwarnings(
                "ignore", message="Full backward hook is firing when gradients are computed"
            )
            self._filter = warnings.filters[0]
        self._handles: list[Any] = []
        try:
            for name, module in model.named_modules():
                self._handles.append(module.register_forward_hook(self._forward_hook(name)))
                if backward:
                    self._handles.append(module.register_full_backward_hook(self._backward_hook(name)))
        except BaseException:  # e.g. a module with an old-style register_backward_hook: leave no hook behind
            self.close()
            raise

    @property
    def anomaly(self) -> Optional[Anomaly]:
        return self.forward_anomaly or self.backward_anomaly

    def close(self) -> None:
        """Remove every hook (idempotent); what was recorded stays readable."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        entry, self._filter = self._filter, None
        filters = warnings.filters
        if entry is not None and isinstance(filters, list) and entry in filters:
            filters.remove(entry)
        self._forward.clear()
        self._backward.clear()

    def __enter__(self) -> AnomalyDetector:
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    # -- hooks ---------------------------------------------------------------------------------

    def _finite(self, value: Any) -> bool:
        """True when no floating tensor in ``value`` holds inf/NaN: a sum is finite only if every
        element is; the element-wise test runs only when it is not (an overflowing sum)."""
        torch = self._torch
        if isinstance(value, torch.Tensor):
            if not value.is_floating_point() or not value.numel():
                return not value.is_complex() or bool(torch.isfinite(value.detach()).all())
            return math.isfinite(value.detach().sum().item()) or bool(torch.isfinite(value.detach()).all())
        if isinstance(value, (tuple, list)):
            return all(self._finite(item) for item in value)
        if isinstance(value, dict):
            return all(self._finite(item) for item in value.values())
        return True

    def _forward_hook(self, name: str) -> Callable[[Any, Any, Any], None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            if module is self._root:
                self.passes += 1
            if self.forward_anomaly is not None:
                return
            self._forward.append(_Call(name, module, "forward", args, output))
            if not self._finite(output):
                self._found("forward", self._forward)

        return hook

    def _backward_hook(self, name: str) -> Callable[[Any, Any, Any], None]:
        def hook(module: Any, grad_input: Any, grad_output: Any) -> None:
            if self.backward_anomaly is not None:
                return
            self._backward.append(_Call(name, module, "backward", grad_output, grad_input))
            if not self._finite(grad_input):
                self._found("backward", self._backward)

        return hook

    def _found(self, phase: str, calls: Iterable[_Call]) -> None:
        history = list(calls)
        culprit = history[-1]
        steps = tuple(self._step(call) for call in history)
        last = steps[-1].outputs
        anomaly = Anomaly(
            name=culprit.name,
            type=type(culprit.module).__name__,
            phase=phase,
            kind=self._kind(culprit.outputs),
            pass_index=self.passes + (1 if phase == "forward" and culprit.module is not self._root else 0),
            entered=last.nonfinite > 0 and self._entered(culprit),
            history=steps,
        )
        if phase == "forward":
            self.forward_anomaly = anomaly
        else:
            self.backward_anomaly = anomaly
        if self.raise_error:
            raise AnomalyError(anomaly)

    # -- statistics, only for the history of an anomaly ------------------------------------------

    def _tensors(self, value: Any) -> list[Any]:
        torch = self._torch
        return [
            leaf.detach()
            for _, leaf in flatten(value)
            if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex())
        ]

    def _stats(self, tensors: list[Any]) -> TensorStats:
        torch = self._torch
        count = nonfinite = 0
        low: Optional[float] = None
        high: Optional[float] = None
        for tensor in tensors:
            magnitude = tensor.abs().double()
            finite = magnitude[torch.isfinite(magnitude)]
            count += tensor.numel()
            nonfinite += tensor.numel() - finite.numel()
            if finite.numel():
                low = float(finite.min()) if low is None else min(low, float(finite.min()))
                high = float(finite.max()) if high is None else max(high, float(finite.max()))
        return TensorStats(count, low, high, nonfinite)

    def _step(self, call: _Call) -> ModuleStep:
        return ModuleStep(
            name=call.name,
            type=type(call.module).__name__,
            phase=call.phase,
            inputs=self._stats(self._tensors(call.inputs)),
            params=self._stats([p.detach() for p in call.module.parameters()]),
            outputs=self._stats(self._tensors(call.outputs)),
        )

    @staticmethod
    def _storage(tensor: Any) -> int:
        try:
            return int(tensor.untyped_storage().data_ptr())
        except (AttributeError, RuntimeError):
            return int(tensor.data_ptr())

    def _entered(self, call: _Call) -> bool:
        """Whether an input of ``call`` holds inf/NaN that the call did not put there: an input sharing
        memory with an output may have been changed in place by the call itself (``x.mul_(...)``,
        ``Dropout(inplace=True)``), so its values now say nothing about what came in."""
        torch = self._torch
        written = {self._storage(tensor) for tensor in self._tensors(call.outputs)}
        return any(
            not bool(torch.isfinite(tensor).all())
            for tensor in self._tensors(call.inputs)
            if self._storage(tensor) not in written
        )

    def _kind(self, value: Any) -> str:
        torch = self._torch
        tensors = self._tensors(value)
        nan = any(bool(torch.isnan(t).any()) for t in tensors)
        inf = any(bool(torch.isinf(t).any()) for t in tensors)
        return "inf and NaN" if nan and inf else ("NaN" if nan else "inf")


def detect_anomalies(
    model: Any, history: int = 8, on_anomaly: str = "raise", backward: bool = True
) -> AnomalyDetector:
    """Watch ``model`` for the first module producing inf or NaN (see :class:`AnomalyDetector`).

    ``with detect_anomalies(model) as detector: loss = model(x).sum(); loss.backward()``
    """
    return AnomalyDetector(model, history=history, on_anomaly=on_anomaly, backward=backward)

"""``compare_modules``: a model built on two sides, its state after construction, then every module's
output in one forward pass, to name the first layer that diverges (torch).

Each side builds the model with the RNGs seeded identically, under its own default device and
dtype (so a buffer computed in ``__init__``, such as a rotary embedding's ``inv_freq``, is computed
there). Parameters and buffers are compared right after construction; then the reference's
``state_dict`` is loaded into the other side, so the forward pass differs only by computation (a
buffer outside the state_dict, ``persistent=False``, keeps each side's own value, as it would after
loading a checkpoint). Forward hooks on every module record each call's inputs and output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Optional

from rankscope.numerics.devices import DeviceArg, make_sides, move, on_side
from rankscope.numerics.diff import diff_leaf, diff_trees
from rankscope.numerics.raised import side_raises
from rankscope.numerics.report import ModuleComparison, ModuleRow, Side, TensorDiff, summarise
from rankscope.numerics.tolerance import noise_words, resolve
from rankscope.numerics.torchload import load_torch
from rankscope.numerics.tree import flatten, tree_map

#: A parameter further apart than this (relative) was drawn differently, not rounded differently.
DRAWN_APART = 1e-2


@dataclass
class Call:
    """One module call as recorded: its tensors copied to the CPU when the call started and ended."""

    key: str
    type: str
    depth: int
    inputs: list[Any]
    output: Any = None
    finished: int = -1


@dataclass
class Recording:
    calls: dict[str, Call] = field(default_factory=dict)
    stack: list[Call] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    finished: int = 0


def _to_cpu(torch: Any, value: Any) -> Any:
    def one(leaf: Any) -> Any:
        return leaf.detach().to("cpu", copy=True) if isinstance(leaf, torch.Tensor) else leaf

    return tree_map(one, value)


def _tensors(torch: Any, value: Any) -> list[Any]:
    return [leaf for _, leaf in flatten(value) if isinstance(leaf, torch.Tensor)]


def _open_module(recording: Recording) -> str:
    """Where the forward pass was when it raised: the innermost module call still open."""
    if not recording.stack:
        return "in the forward pass"
    call = recording.stack[-1]
    return f"in module {call.key!r} ({call.type})" if call.key else f"in the model's forward ({call.type})"


def _record(torch: Any, model: Any, inputs: Sequence[Any], recording: Recording) -> Any:
    """One forward pass, each module call recorded into ``recording``; the output, on the CPU."""
    handles = []

    def before(name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            count = recording.seen.get(name, 0) + 1
            recording.seen[name] = count
            key = name if count == 1 else f"{name}#{count}"
            call = Call(
                key,
                type(module).__name__,
                len(recording.stack),
                _tensors(torch, _to_cpu(torch, (args, kwargs))),
            )
            recording.calls[key] = call
            recording.stack.append(call)

        return hook

    def after(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        call = recording.stack.pop()
        call.output = _to_cpu(torch, output)
        call.finished = recording.finished
        recording.finished += 1

    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(before(name), with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        with torch.no_grad():
            output = model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return _to_cpu(torch, output)


def _build(torch: Any, factory: Callable[[], Any], side: Side, seed: int, train: bool) -> Any:
    with on_side(torch, side, seed):
        model = factory()
    model = model.to(side.device)
    return model.train() if train else model.eval()


def _state_diffs(
    torch: Any, reference: dict[str, Any], other: dict[str, Any], tolerances: Optional[tuple[float, float]]
) -> list[TensorDiff]:
    diffs = []
    for name, tensor in reference.items():
        if name in other:
            diffs.append(TensorDiff(name, diff_leaf(torch, name, tensor, other[name], tolerances)))
    return diffs


def _row(torch: Any, ref: Call, oth: Optional[Call], tolerances: Optional[tuple[float, float]]) -> ModuleRow:
    if oth is None:
        return ModuleRow(ref.key, ref.type, ref.depth, 0.0, 0.0, 1, 1, False, None)
    out = summarise(Side("-"), Side("-"), diff_trees(torch, ref.output, oth.output, tolerances, noise=True))
    inputs_ok: Optional[bool] = None
    if ref.inputs or oth.inputs:
        inputs = diff_trees(torch, ref.inputs, oth.inputs, tolerances, noise=True)
        inputs_ok = summarise(Side("-"), Side("-"), inputs).ok
    return ModuleRow(
        ref.key,
        ref.type,
        ref.depth,
        out.max_abs_diff,
        out.max_rel_diff,
        out.mismatched,
        out.total,
        out.ok,
        inputs_ok,
    )


def _mark_starts(rows: list[ModuleRow]) -> list[ModuleRow]:
    """Mark the rows where a divergence starts: inputs agree, output does not, no such call inside."""
    candidates = [not row.ok and row.inputs_ok is not False for row in rows]
    marked = []
    for index, row in enumerate(rows):
        inside = index + 1
        while inside < len(rows) and rows[inside].depth > row.depth:
            inside += 1
        starts = candidates[index] and not any(candidates[index + 1 : inside])
        marked.append(replace(row, starts_here=starts))
    return marked


def compare_modules(
    model_factory: Callable[[], Any],
    *inputs: Any,
    devices: DeviceArg = None,
    dtypes: Optional[Sequence[Any]] = None,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    seed: int = 0,
    train: bool = False,
) -> ModuleComparison:
    """Build ``model_factory()`` on both sides and compare its state, then each module's output.

    Sides, inputs and tolerances as for :func:`rankscope.numerics.compare`. The models run in
    ``eval()`` mode (dropout off) unless ``train``, under ``torch.no_grad()``. Every module call's
    inputs and output are copied to the CPU: pass a small input to a large model.
    """
    torch = load_torch()
    tolerances = resolve(rtol, atol)
    reference, other = make_sides(torch, devices, dtypes)
    sides = (("reference", reference), ("other", other))
    models = []
    for which, side in sides:
        with side_raises(which, side, lambda: "while building the model"):
            models.append(_build(torch, model_factory, side, seed, train))
    params = [{name: p.detach().cpu() for name, p in m.named_parameters()} for m in models]
    buffers = [{name: b.detach().cpu() for name, b in m.named_buffers()} for m in models]
    param_diffs = _state_diffs(torch, params[0], params[1], tolerances)
    buffer_diffs = _state_diffs(torch, buffers[0], buffers[1], tolerances)
    notes = []
    if any(not d.diff.ok and d.diff.max_rel_diff > DRAWN_APART for d in param_diffs):
        notes.append(
            "parameters differ beyond rounding: random initialisation is not the same on both sides "
            "(float64 draws other numbers than float32, each device has its own generator, a low precision "
            "can round a draw to the other end of its range); the reference's parameters were loaded into "
            "the other side before the forward pass, so only the computation is compared"
        )
    state = models[0].state_dict()
    with side_raises("other", other, lambda: "loading the reference's state_dict"):
        models[1].load_state_dict(state)
    records = []
    outputs = []
    for model, (which, side) in zip(models, sides):
        recording = Recording()
        with side_raises(which, side, partial(_open_module, recording)), on_side(torch, side, seed):
            output = _record(torch, model, move(torch, tuple(inputs), side), recording)
        records.append(recording)
        outputs.append(output)
    ref_calls, oth_calls = records[0].calls, records[1].calls
    rows = [_row(torch, call, oth_calls.get(key), tolerances) for key, call in ref_calls.items()]
    extra = sorted(set(oth_calls) - set(ref_calls))
    if extra:
        notes.append(f"called on the other side only: {', '.join(extra)}")
    rows = _mark_starts(rows)
    by_finish = sorted(zip(ref_calls.values(), rows), key=lambda pair: pair[0].finished)
    divergent = [row for _, row in by_finish if not row.ok]
    introduced = [row for row in divergent if row.starts_here]
    output = summarise(reference, other, diff_trees(torch, outputs[0], outputs[1], tolerances, noise=True))
    return ModuleComparison(
        reference=reference,
        other=other,
        rtol=tolerances[0] if tolerances else None,
        atol=tolerances[1] if tolerances else None,
        param_mismatches=tuple(d for d in param_diffs if not d.diff.ok),
        buffer_mismatches=tuple(d for d in buffer_diffs if not d.diff.ok),
        params_compared=len(param_diffs),
        buffers_compared=len(buffer_diffs),
        copied=tuple(state),
        rows=tuple(rows),
        first_divergent=divergent[0].name if divergent else None,
        first_introduced=introduced[0].name if introduced else None,
        output=output,
        ok=output.ok and not divergent and not any(not d.diff.ok for d in buffer_diffs),
        notes=tuple(notes),
        tolerance_words=None if tolerances else noise_words(*(s.dtype or "" for s in (reference, other))),
    )

"""Look up planned (HF-layout) output tensors by module, and record which ones were used.

The ``vllm-sharded`` layout builds every engine parameter from the tensors the HF layout
would write (renamed, FSE-redirected, padded). This index serves them by name and by module
(``model.layers.3.self_attn.q_a_proj`` -> ``{"weight": ..., "weight_scale_inv": ...}``),
knows each one's role and scheme (from its source tensor), and keeps track of what was taken
so that nothing is silently left behind.

Example::

    index = PlannedIndex(ctx, planned)
    index.module("model.layers.3.self_attn.q_a_proj").keys()   # dict_keys(['weight', ...])
    index.take("model.layers.3.self_attn.q_a_proj.weight")      # OutputTensor, now used
    index.unused()                                              # names nobody took
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint_tool.plan.model import OutputTensor
from checkpoint_tool.plan.output_table import KINDS
from checkpoint_tool.quant.scheme import Scheme

if TYPE_CHECKING:
    from checkpoint_tool.plan.inputs import PlanInputs
    from checkpoint_tool.plan.outputs import Planned


class PlannedIndex:
    """Planned tensors by name and by module, with use tracking."""

    def __init__(self, ctx: PlanInputs, planned: Planned) -> None:
        self.ctx = ctx
        self.planned = planned
        self.by_name: dict[str, OutputTensor] = {t.name: t for t in planned.tensors}
        self.by_module: dict[str, dict[str, OutputTensor]] = {}
        for t in self.by_name.values():
            module, _, suffix = t.name.rpartition(".")
            self.by_module.setdefault(module, {})[suffix] = t
        outputs = planned.outputs
        _, form, _, kind, _, _ = outputs.columns()
        names = outputs.output_names()
        padded = [f.padded for f in outputs.forms]
        self._padded = {n for n, f in zip(names, form.tolist(), strict=True) if padded[f]}
        self._kind = {n: KINDS[k] for n, k in zip(names, kind.tolist(), strict=True) if k}
        self.used: set[str] = set()
        self.dropped: set[str] = set()

    def module(self, module: str) -> dict[str, OutputTensor]:
        """Tensors of ``module`` by parameter suffix (empty if none)."""
        return self.by_module.get(module, {})

    def get(self, name: str) -> OutputTensor | None:
        return self.by_name.get(name)

    def take(self, name: str) -> OutputTensor:
        """The planned tensor ``name``, marked used (KeyError if absent)."""
        tensor = self.by_name[name]
        self.used.add(name)
        return tensor

    def drop(self, name: str) -> OutputTensor:
        """Mark ``name`` as deliberately not written (the caller records why)."""
        tensor = self.by_name[name]
        self.dropped.add(name)
        return tensor

    def unused(self) -> list[str]:
        return sorted(set(self.by_name) - self.used - self.dropped)

    def source(self, tensor: OutputTensor) -> str:
        return tensor.pieces[0].source

    def role(self, tensor: OutputTensor) -> str:
        """Role of the source tensor (weight / scale / global_scale / input_scale / ...)."""
        return self.ctx.resolved.tensors[self.source(tensor)].role

    def scheme(self, tensor: OutputTensor) -> Scheme:
        return self.ctx.resolved.tensors[self.source(tensor)].scheme

    def is_padded(self, name: str) -> bool:
        return name in self._padded

    def kind(self, name: str) -> str:
        return self._kind.get(name, "kept")

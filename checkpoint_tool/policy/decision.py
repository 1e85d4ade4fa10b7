"""The policy decision: what ckpt decided per MoE layer, computed once, typed, small.

``decide_policy`` (``policy.build``) makes it from the catalog and the engine options; the
planner (``plan.build``) takes it as its input; ``ckpt inspect`` renders it into the
``PolicyReport`` JSON (``policy.build.render_report``). The report never feeds the planner.

Example (quark-hybrid, ``--tp 2 --fse on --target vllm-per-layer-fse``)::

    d = decide_policy(catalog, tp=2, fse="on", target="vllm-per-layer-fse")
    d.fse_layers()                       # {1: False, 2: False, 3: True, 4: True}
    d.layer(3).fse.slots, d.layer(3).routed_alignment   # ([8], 32)
    d.layer(1).fse.code                  # 'quark_different_configs'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.policy.report import FseDecision
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue


@dataclass(frozen=True)
class LayerDecision:
    """One MoE layer: FSE on/off with its slots and reason, and the split alignments.

    ``routed_alignment``: the per-rank granularity the routed intermediate needs (the shared
    expert's schemes joined in when it is fused); ``shared_alignment``: the same for a shared
    MLP that stays separate (None when fused or absent).
    """

    facts: MoeLayerFacts
    fse: FseDecision
    routed_alignment: int
    routed_alignment_from: str
    shared_alignment: int | None = None
    shared_alignment_from: str = ""
    #: projection -> scheme of the stored routed / shared expert 0 (as resolved)
    routed_schemes: Mapping[str, Scheme] = field(default_factory=dict)
    shared_schemes: Mapping[str, Scheme] = field(default_factory=dict)

    @property
    def layer(self) -> int:
        return self.facts.layer

    @property
    def fused(self) -> bool:
        """Are the shared experts written as routed slots ``n_routed + j``?"""
        return self.fse.enabled and self.facts.n_shared > 0


@dataclass(frozen=True)
class PolicyDecision:
    """Everything the planner needs from the policy (see the module docstring)."""

    target: Any  # policy.engine.model.Target
    tp: int
    ep: bool
    fse_mode: str
    facts: ModelFacts
    resolved: Any  # quant.resolve.ResolvedCatalog
    layers: Mapping[int, LayerDecision]
    eplb: bool = False
    all2all: str | None = None
    #: model-wide findings of the options (``--fse on`` refused, a layer mix under EP, ...)
    option_issues: tuple[Issue, ...] = ()

    @property
    def moe_tp(self) -> int:
        """How many ranks split an expert's intermediate dim (1 under expert parallelism)."""
        return 1 if self.ep else self.tp

    def layer(self, index: int) -> LayerDecision | None:
        return self.layers.get(index)

    def fse_layers(self) -> dict[int, bool]:
        """MoE layer -> shared experts redirected into routed slots."""
        return {k: d.fused for k, d in sorted(self.layers.items())}

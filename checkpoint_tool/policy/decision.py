"""The policy decision: what ckpt decided per MoE layer, computed once, typed, small.

``decide_policy`` (``policy.build``) makes it from the catalog and the engine options; the
planner (``plan.build``), the engine verdict (``policy.engine.build.build_engine_report``) and
``ckpt validate`` take it as their input; ``ckpt inspect`` renders it into the ``PolicyReport``
JSON (``policy.to_report.render_report``), which embeds ``FseDecision`` and ``TpGeometry`` as
they are. The report never feeds anything back.

Example (quark-hybrid, ``--tp 2 --fse on --target vllm-per-layer-fse``)::

    d = decide_policy(catalog, tp=2, fse="on", target="vllm-per-layer-fse")
    d.fse_layers()                       # {1: False, 2: False, 3: True, 4: True}
    d.layer(3).fse.slots, d.layer(3).routed_alignment   # ([8], 32)
    d.layer(1).fse.code                  # 'quark_different_configs'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.policy.consistency import moe_structure_issues
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import TensorEntry
    from checkpoint_tool.policy.engine.model import Target
    from checkpoint_tool.quant.resolve import ResolvedCatalog

FseMode = Literal["auto", "on", "off"]


class _DecisionModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FseDecision(_DecisionModel):
    """May this layer's shared expert(s) become routed slots ``n_routed + j``?"""

    enabled: bool
    #: stable id of the decision, e.g. "ok", "quark_excludes_shared", "no_shared_experts"
    code: str
    #: the reason in the engine's words (exact vLLM strings for vLLM gates); None when enabled
    reason: str | None = None
    #: ``reason`` with the layer index in the module prefix written ``N``
    #: (``... at model.layers.N.mlp.shared_experts``); groups layers in the summary
    reason_template: str | None = None
    #: who says so: "vllm" (mirrors is_shared_expert_quant_fse_compatible), "ckpt" (layout
    #: checks of this tool), "option" (--fse / --ep / --eplb / --all2all), "target" (what the
    #: ``--target`` engine fuses when it loads the output, under ``--fse auto``)
    source: Literal["vllm", "ckpt", "option", "target", "none"] = "none"
    #: routed slot index of each shared chunk when enabled, e.g. [256] or [64, 65]
    slots: list[int] = Field(default_factory=list)
    #: width of one shared chunk (= one appended routed expert)
    chunk_size: int = 0


class TpGeometry(_DecisionModel):
    """How an expert intermediate dimension splits over ``tp`` ranks.

    ``per_rank`` is vLLM's floor division ``size // tp``; it must be a multiple of
    ``alignment`` (group 32 MXFP4, 16 NVFP4, 128 block FP8, ...). When not, ``pad_to`` is the
    smallest total size whose per-rank share is aligned and ``padded_per_rank`` that share.
    """

    size: int
    tp: int
    alignment: int
    #: which scheme/projection set the alignment, e.g. "down_proj mxfp4/32 (input groups)"
    alignment_from: str = ""
    per_rank: int
    divisible: bool
    aligned: bool
    padded_per_rank: int
    pad_to: int


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
    """Everything the planner and the engine verdict need from the policy (see the module
    docstring). ``entries``: the catalog's tensors the decision was made from;
    ``prefused``: MoE layer -> routed slots a previous conversion filled (config.json)."""

    target: Target
    tp: int
    ep: bool
    fse_mode: FseMode
    facts: ModelFacts
    resolved: ResolvedCatalog
    layers: Mapping[int, LayerDecision]
    entries: Mapping[str, TensorEntry] = field(default_factory=dict)
    prefused: Mapping[int, list[int]] = field(default_factory=dict)
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

    @cached_property
    def structure_issues(self) -> list[Issue]:
        """The MoE structure findings (``policy.consistency.moe_structure_issues``): experts
        missing or unexplained, shared experts undeclared, FSE slots incomplete. Computed on
        first use (the planner never asks), once for the report and the engine verdict."""
        return moe_structure_issues(self.facts, self.entries, self.prefused)

"""Everything the planner knows before it places a single tensor (built once per plan).

Example::

    ctx = PlanContext.create(catalog, policy, recipe, PlanOptions(tp=2))
    ctx.fse_layers      # {1: False, 2: False, 3: True, 4: True}
    ctx.geometry.padded # 192
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import UsageError
from checkpoint_tool.model import ModelFacts, family_of, model_facts
from checkpoint_tool.plan.experts import ExpertPart, index_experts
from checkpoint_tool.plan.geometry import Geometry, plan_geometry
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.quant.resolve import ResolvedCatalog, resolve_catalog
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import get_storage_format
from checkpoint_tool.recipes import Recipe, RuleSet

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """Decoder layer index in a tensor name (``model.layers.3.`` / ``layers.3.``), else None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


@dataclass
class PlanContext:
    catalog: Catalog
    policy: Any
    recipe: Recipe
    options: PlanOptions
    rules: RuleSet
    resolved: ResolvedCatalog
    facts: ModelFacts
    experts: dict[str, ExpertPart]
    #: MoE layer -> shared experts redirected into routed slots (policy AND recipe support)
    fse_layers: dict[int, bool]
    geometry: Geometry
    notes: list[str] = field(default_factory=list)
    _codecs: dict[tuple, Any] = field(default_factory=dict, repr=False)
    #: placements already computed, by shape signature (see ``outputs._expert_placement``)
    placements: dict[tuple, Any] = field(default_factory=dict, repr=False)
    _weights: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls,
        catalog: Catalog,
        policy: Any,
        recipe: Recipe,
        options: PlanOptions,
        *,
        resolved: ResolvedCatalog | None = None,
        facts: ModelFacts | None = None,
    ) -> PlanContext:
        if options.tp < 1:
            raise UsageError(f"--tp must be >= 1, got {options.tp}")
        if policy is not None and getattr(policy, "tp", options.tp) != options.tp:
            raise UsageError(
                f"the policy was built for --tp {policy.tp} but the plan asks for --tp "
                f"{options.tp}; build both with the same --tp"
            )
        mode = getattr(policy, "fse_mode", options.fse) if policy is not None else options.fse
        if mode != options.fse:
            raise UsageError(
                f"the policy was built with --fse {mode} but the plan asks for --fse "
                f"{options.fse}; build both with the same --fse"
            )
        config = catalog.config or {}
        rc = resolved if resolved is not None else resolve_catalog(catalog)
        if facts is None:
            shapes = None
            if family_of(config) == "generic":
                shapes = {n: e.shape for n, e in catalog.tensors.items()}
            facts = model_facts(config, catalog.tensors, tensor_shapes=shapes)
        notes: list[str] = []
        fse = _effective_fse(facts, policy, recipe, options, notes)
        geometry = plan_geometry(
            facts, policy, fse, tp=options.tp, pad_to=options.pad_to, config=config
        )
        return cls(
            catalog=catalog,
            policy=policy,
            recipe=recipe,
            options=options,
            rules=RuleSet(recipe, config),
            resolved=rc,
            facts=facts,
            experts=index_experts(facts, rc.tensors),
            fse_layers=fse,
            geometry=geometry,
            notes=notes,
        )

    def codec(self, scheme: Scheme) -> Any:
        """The storage side of ``scheme``'s codec (``quant.storage``: shapes, regions, pads;
        no numbers, no torch), cached: one per distinct storage scheme."""
        key = (
            scheme.format,
            scheme.block,
            scheme.group_size,
            scheme.scale_dtypes,
            scheme.scale_is_e8m0,
            scheme.weight_dtypes,
            id(scheme.spec),
        )
        codec = self._codecs.get(key)
        if codec is None:
            codec = self._codecs[key] = get_storage_format(scheme)
        return codec

    def weight_of(self, module: str) -> str | None:
        """The weight tensor of an expert ``module`` (3-D fused params are their own module)."""
        if self._weights is None:
            self._weights = {
                t.module: name
                for name, t in self.resolved.tensors.items()
                if t.role == "weight" and name in self.experts
            }
        return self._weights.get(module)


def _effective_fse(
    facts: ModelFacts,
    policy: Any,
    recipe: Recipe,
    options: PlanOptions,
    notes: list[str],
) -> dict[int, bool]:
    """Per MoE layer: redirect its shared experts? The policy decides; the planner only
    refuses what the recipe's loader cannot hold."""
    decided: dict[int, bool] = {}
    for layer in facts.moe_layers:
        pol = policy.layer(layer.layer) if policy is not None else None
        decided[layer.layer] = bool(pol is not None and pol.fse.enabled and layer.n_shared > 0)
    enabled = sorted(k for k, v in decided.items() if v)
    if enabled and not recipe.fse.supported:
        if options.fse == "on":
            raise UsageError(
                f"--fse on: recipe {recipe.name} cannot hold shared experts in routed slots "
                f"({recipe.fse.reason}); use --fse off or another recipe"
            )
        notes.append(
            f"shared experts stay shared on MoE layer(s) {enabled}: the policy allows FSE there "
            f"but recipe {recipe.name} does not support it ({recipe.fse.reason})"
        )
        decided = dict.fromkeys(decided, False)
    return decided

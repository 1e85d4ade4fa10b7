"""What the planner is given, built once per plan: the catalog, the policy decision, the rules.

Immutable apart from a lookup cache (storage codecs by scheme) and the notes the layouts add.
The decision comes from ``policy.build.decide_policy``; the planner never reads the inspect
report. The only planner-side change to the decision: a layer the policy fuses is left
unfused when the recipe's loader cannot hold shared experts in routed slots (a note says so;
with ``--fse on`` it is an error).

Example::

    inputs = plan_inputs(catalog, decide_policy(catalog, tp=2), recipe, PlanOptions(tp=2))
    inputs.fse_layers        # {1: False, 2: False, 3: False, 4: False}
    inputs.geometry.padded   # 192
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import UsageError
from checkpoint_tool.model import ModelFacts
from checkpoint_tool.plan.geometry import Geometry, plan_geometry
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.policy.decision import PolicyDecision
from checkpoint_tool.quant.resolve import ResolvedCatalog
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import StorageFormat, get_storage_format
from checkpoint_tool.recipes import Recipe, RuleSet

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """Decoder layer index in a tensor name (``model.layers.3.`` / ``layers.3.``), else None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def layer_column(names: list[str]) -> np.ndarray:
    """``layer_of`` of every name, -1 for None (int32)."""
    return np.fromiter(
        (int(m.group(1)) if m else -1 for m in map(_LAYER.search, names)), np.int32, len(names)
    )


@dataclass(frozen=True)
class PlanInputs:
    catalog: Catalog
    decision: PolicyDecision
    recipe: Recipe
    options: PlanOptions
    rules: RuleSet
    #: MoE layer -> shared experts redirected into routed slots (policy AND recipe support)
    fse_layers: dict[int, bool]
    geometry: Geometry
    #: findings for the plan's notes (the layouts add theirs)
    notes: list[str] = field(default_factory=list)
    #: storage key -> codec (one per distinct storage scheme)
    codecs: dict[tuple, StorageFormat] = field(default_factory=dict, repr=False, compare=False)

    @property
    def resolved(self) -> ResolvedCatalog:
        """The catalog resolved to roles and schemes (``quant.resolve.ResolvedCatalog``)."""
        return self.decision.resolved

    @property
    def facts(self) -> ModelFacts:
        return self.decision.facts

    def codec(self, scheme: Scheme) -> StorageFormat:
        """The storage side of ``scheme``'s codec (``quant.storage``: shapes, regions, pads;
        no numbers, no torch), one per distinct storage scheme."""
        key = scheme.storage_key
        codec = self.codecs.get(key)
        if codec is None:
            codec = self.codecs[key] = get_storage_format(scheme)
        return codec



def plan_inputs(
    catalog: Catalog, decision: PolicyDecision, recipe: Recipe, options: PlanOptions
) -> PlanInputs:
    """Index the experts, settle FSE against the recipe, size the padded intermediate."""
    if (decision.tp, decision.fse_mode) != (options.tp, options.fse):
        raise UsageError(
            f"the policy was decided for --tp {decision.tp} --fse {decision.fse_mode} but the "
            f"plan asks for --tp {options.tp} --fse {options.fse}; decide both with the same "
            "options"
        )
    notes: list[str] = []
    fse = _recipe_fse(decision, recipe, options, notes)
    geometry = plan_geometry(decision, fse, pad_to=options.pad_to, config=catalog.config)
    return PlanInputs(
        catalog=catalog,
        decision=decision,
        recipe=recipe,
        options=options,
        rules=RuleSet(recipe, catalog.config or {}),
        fse_layers=fse,
        geometry=geometry,
        notes=notes,
    )


def _recipe_fse(
    decision: PolicyDecision, recipe: Recipe, options: PlanOptions, notes: list[str]
) -> dict[int, bool]:
    """Per MoE layer: redirect its shared experts? The policy decides; the planner only
    refuses what the recipe's loader cannot hold."""
    decided = decision.fse_layers()
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

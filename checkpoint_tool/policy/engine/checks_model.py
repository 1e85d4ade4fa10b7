"""Model-structure rules: tensors the engine's model has no parameter for, or misses.

- ``router_bias_without_noaux_tc``: DeepSeek-V2/V3 in vLLM registers
  ``mlp.gate.e_score_correction_bias`` only when ``topk_method == "noaux_tc"``
  (``DeepseekV2MoE.__init__``, deepseek_v2.py); a bias in the checkpoint without it falls
  through to ``params_dict[name]`` in ``DeepseekV2Model.load_weights``: ``KeyError``.
- ``router_bias_missing``: the reverse, the parameter allocated but never loaded
  (``DefaultModelLoader.load_weights``: "Following weights were not initialized ...").
- ``checkpoint_incomplete``: the decision's structural findings (missing experts, stray expert
  indices, missing or undeclared shared experts, incomplete FSE slots) lifted into the
  engine verdict: each is a tensor the loader does not know or a parameter it never fills.

Example::

    check_model(ctx, rules)
    # [EngineFinding(rule='router_bias_without_noaux_tc', layers=[1, 2],
    #   upstream="KeyError: 'layers.1.mlp.gate.e_score_correction_bias'")]
"""

from __future__ import annotations

import re

from .context import EngineContext
from .model import EngineFinding, RuleSpec

MODEL_RULES = ("router_bias_without_noaux_tc", "router_bias_missing", "checkpoint_incomplete")

#: structure finding rules that mean a load failure (unknown tensor or unfilled parameter)
LOAD_FAILURES = frozenset(
    {
        "moe_expert_missing",
        "moe_expert_unexplained",
        "moe_expert_count",
        "moe_layer_unexplained",
        "shared_expert_missing",
        "shared_expert_unexplained",
        "fse_slot_missing",
    }
)

_BIAS = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.gate\.e_score_correction_bias$")
#: model types built by vLLM's deepseek_v2.py (DeepseekV2/V3ForCausalLM)
_DEEPSEEK_V2_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}


def _bias_layers(ctx: EngineContext) -> dict[int, str]:
    """Layer -> its router bias tensor (the last one in catalog order), read per name
    pattern (``catalog.patterns``)."""
    table = ctx.catalog.table
    patterns = table.patterns()
    found: list[tuple[int, int]] = []  # (row, layer)
    for k, m in patterns.matching(_BIAS):
        rows = patterns.rows(k)
        found += zip(rows.tolist(), patterns.numbers(rows, *m.span(1)).tolist(), strict=True)
    return {int(layer): table.name(row) for row, layer in sorted(found)}


def check_model(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the model-structure rules active in ``rules``."""
    out: list[EngineFinding] = []
    facts = ctx.facts
    model_type = str(ctx.config.get("model_type") or "")
    if facts is not None and model_type in _DEEPSEEK_V2_TYPES:
        topk = ctx.config.get("topk_method")
        biases = _bias_layers(ctx)
        main = {m.layer for m in facts.moe_layers if not m.is_mtp}
        rule = rules.get("router_bias_without_noaux_tc")
        stray = sorted(k for k in biases if k in main)
        if rule is not None and topk != "noaux_tc" and stray:
            key = biases[stray[0]].removeprefix("model.")
            out.append(
                rule.finding(layers=stray, key=key, topk_method=topk, tensors=[biases[stray[0]]])
            )
        rule = rules.get("router_bias_missing")
        missing = sorted(main - set(biases))
        if rule is not None and topk == "noaux_tc" and missing:
            key = f"layers.{missing[0]}.mlp.gate.e_score_correction_bias"
            out.append(rule.finding(layers=missing, key=key))
    rule = rules.get("checkpoint_incomplete")
    decision = ctx.decision
    if rule is not None and decision is not None:
        found = [
            i
            for i in decision.structure_issues
            if i.severity == "error" and i.rule in LOAD_FAILURES
        ]
        if found:
            first = f"[{found[0].rule}] {found[0].message}"
            out.append(
                rule.finding(
                    count=len(found),
                    first=first,
                    tensors=[i.tensor for i in found if i.tensor],
                    details={"rules": sorted({i.rule for i in found})},
                )
            )
    return out

"""Fused-shared-expert rules: does the engine accept the per-layer FSE decisions?

The per-layer decisions come from the policy decision (vLLM's gates per layer, before ckpt's
own model-wide option rule): a layer is "fusable" when its decision is enabled or was only
turned off by the parallelism rule. An all-or-nothing engine (vLLM 0.33) refuses a model
whose MoE layers disagree; an engine with per-layer FSE still needs one physical expert
count per layer under ``--ep`` / ``--eplb`` / ``--all2all nixl_ep``.

Example::

    check_fse(ctx, rules)
    # [EngineFinding(rule='fse_mixed_all_or_nothing', layers=[1, 2, 3], details={
    #   'enabled': [2, 3], 'disabled': [1]})]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .context import EngineContext
from .model import EngineFinding, RuleSpec

if TYPE_CHECKING:
    from checkpoint_tool.policy.decision import PolicyDecision

FSE_RULES = ("fse_mixed_all_or_nothing", "fse_mixed_under_parallelism", "fse_slots_unfused")

_NOT_APPLICABLE = {"no_shared_experts", "fse_off"}
#: decisions the engine's gate allowed but ckpt (target or option rule) turned off
_GATE_OK = {"parallel_mixed", "target_no_fse", "target_all_or_nothing", "prefused"}


def fse_split(decision: PolicyDecision | None) -> tuple[list[int], list[int]]:
    """(layers whose shared experts vLLM's gates would fuse, layers they would not)."""
    on: list[int] = []
    off: list[int] = []
    if decision is None or decision.fse_mode == "off":
        return on, off
    for index, layer in decision.layers.items():
        code = layer.fse.code
        if code in _NOT_APPLICABLE:
            continue
        (on if layer.fse.enabled or code in _GATE_OK else off).append(index)
    return sorted(on), sorted(off)


def prefused_layers(decision: PolicyDecision | None) -> dict[int, list[int]]:
    """MoE layer -> routed slots a previous ``ckpt convert`` filled with shared experts."""
    if decision is None:
        return {}
    return {
        index: layer.fse.slots
        for index, layer in sorted(decision.layers.items())
        if layer.fse.code == "prefused"
    }


def _unfused_slots(
    ctx: EngineContext, rule: RuleSpec, on: list[int], off: list[int]
) -> list[EngineFinding]:
    """Slots ``experts.{n_routed + j}`` in the checkpoint that the engine will not map: with
    FSE off the expert mapping stops at ``n_routed`` (``make_expert_params_mapping``,
    deepseek_v2.py ``load_weights``) and the name falls through to ``params_dict[name]``."""
    slots = prefused_layers(ctx.decision)
    if not slots:
        return []
    if ctx.target.fse == "all_or_nothing" and off:
        return []  # the engine refuses the mix first (fse_mixed_all_or_nothing)
    if ctx.target.fse != "none":
        return []
    first = min(slots)
    facts = ctx.facts
    layer = facts.layer(first) if facts is not None else None
    module = (
        layer.routed_module(slots[first][0], "down")
        if layer is not None
        else f"model.layers.{first}.mlp.experts.{slots[first][0]}.down_proj"
    )
    key = module.removeprefix("model.") + ".weight"
    return [
        rule.finding(
            layers=sorted(slots),
            slots=slots[first],
            key=key,
            target=ctx.target.name,
            details={"slots": {str(k): v for k, v in sorted(slots.items())}},
        )
    ]


def _flags(ctx: EngineContext) -> list[str]:
    o = ctx.options
    flags = ["--ep"] if o.ep else []
    flags += ["--eplb"] if o.eplb else []
    flags += ["--all2all nixl_ep"] if o.all2all == "nixl_ep" else []
    return flags


def check_fse(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the FSE rules active in ``rules``."""
    on, off = fse_split(ctx.decision)
    out = []
    if "fse_slots_unfused" in rules:
        out += _unfused_slots(ctx, rules["fse_slots_unfused"], on, off)
    if not on or not off:
        return out
    details = {"enabled": on, "disabled": off}
    rule = rules.get("fse_mixed_all_or_nothing")
    if rule is not None and ctx.target.fse == "all_or_nothing":
        out.append(
            rule.finding(
                layers=on + off,
                enabled=on,
                disabled=off,
                n_enabled=len(on),
                n_disabled=len(off),
                target=ctx.target.name,
                details=details,
            )
        )
    rule = rules.get("fse_mixed_under_parallelism")
    flags = _flags(ctx)
    if rule is not None and ctx.target.fse == "per_layer" and flags:
        out.append(
            rule.finding(
                layers=on + off, enabled=on, disabled=off, flags=", ".join(flags), details=details
            )
        )
    return out

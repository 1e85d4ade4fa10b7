"""Fused-shared-expert rules: does the engine accept the per-layer FSE decisions?

The per-layer decisions come from the policy report (vLLM's gates per layer, before ckpt's
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

from typing import Any

from .context import EngineContext
from .model import EngineFinding, RuleSpec

FSE_RULES = ("fse_mixed_all_or_nothing", "fse_mixed_under_parallelism")

_NOT_APPLICABLE = {"no_shared_experts", "fse_off"}


def fse_split(policy: Any) -> tuple[list[int], list[int]]:
    """(layers whose shared experts vLLM's gates would fuse, layers they would not)."""
    on, off = [], []
    if policy is None or getattr(policy, "fse_mode", "auto") == "off":
        return on, off
    for layer in policy.moe_layers:
        code = layer.fse.code
        if code in _NOT_APPLICABLE:
            continue
        (on if layer.fse.enabled or code == "parallel_mixed" else off).append(layer.layer)
    return sorted(on), sorted(off)


def _flags(ctx: EngineContext) -> list[str]:
    o = ctx.options
    flags = ["--ep"] if o.ep else []
    flags += ["--eplb"] if o.eplb else []
    flags += ["--all2all nixl_ep"] if o.all2all == "nixl_ep" else []
    return flags


def check_fse(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the FSE rules active in ``rules``."""
    on, off = fse_split(ctx.policy)
    if not on or not off:
        return []
    details = {"enabled": on, "disabled": off}
    out = []
    rule = rules.get("fse_mixed_all_or_nothing")
    if rule is not None and ctx.target.fse == "all_or_nothing":
        out.append(
            rule.finding(
                layers=on + off, enabled=on, disabled=off, target=ctx.target.name, details=details
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

"""Fused-shared-expert rules: does the engine accept the per-layer FSE decisions?

The per-layer decisions come from the policy decision (vLLM's gates per layer, before ckpt's
own model-wide option rule): a layer is "fusable" when its decision is enabled or was only
turned off by the parallelism rule. An all-or-nothing engine (vLLM 0.33) refuses a model
whose MoE layers disagree, the main model and its MTP drafter each on its own (``fse.fse_model``:
each calls ``is_model_fused_shared_expert_compatible`` on its own layers); an engine with per-layer FSE still needs one physical expert
count per layer under ``--ep`` / ``--eplb`` / ``--all2all nixl_ep``.

Example::

    check_fse(ctx, rules)
    # [EngineFinding(rule='fse_mixed_all_or_nothing', layers=[1, 2, 3], details={
    #   'enabled': [2, 3], 'disabled': [1]})]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint_tool.policy.fse import by_model, fse_model

from .context import EngineContext
from .model import EngineFinding, RuleSpec

if TYPE_CHECKING:
    from checkpoint_tool.policy.decision import PolicyDecision

FSE_RULES = (
    "fse_mixed_all_or_nothing",
    "fse_mixed_under_parallelism",
    "fse_slots_unfused",
    "fse_redirect_scalar",
)
#: the models whose ``load_weights`` redirects shared experts online (deepseek_v2.py)
_REDIRECTING = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}

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


def mixed_models(decision: PolicyDecision | None) -> dict[str, tuple[list[int], list[int]]]:
    """model (``fse_model``) -> (fusable, not fusable) layers of each model whose MoE layers
    disagree: what an all-or-nothing engine refuses."""
    on, off = fse_split(decision)
    if decision is None or not on or not off:
        return {}
    models = {k: fse_model(d.facts) for k, d in decision.layers.items()}
    ons, offs = by_model(on, models), by_model(off, models)
    return {m: (ons[m], offs[m]) for m in ons if m in offs}


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
    if ctx.target.fse == "all_or_nothing" and mixed_models(ctx.decision):
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


def _scalar_redirect(
    ctx: EngineContext, rule: RuleSpec, on: list[int], off: list[int]
) -> list[EngineFinding]:
    """0-d shared-expert tensors on layers the engine fuses online: vLLM's redirection
    (deepseek_v2.py ``DeepseekV2Model.load_weights``) splits every ``mlp.shared_experts``
    tensor into ``n_shared_experts`` chunks, ``total = loaded_weight.shape[split_dim]``, and a
    0-d tensor (NVFP4 ``weight_scale_2`` / ``input_scale``) raises IndexError. Layers a
    previous convert pre-fused hold no such names."""
    if not ctx.target.fuses or not on:
        return []
    if ctx.target.fse == "all_or_nothing" and "main" in mixed_models(ctx.decision):
        return []
    if not _REDIRECTING & set(ctx.config.get("architectures") or []):
        return []
    prefused = prefused_layers(ctx.decision)
    layers = ctx.decision.layers.values() if ctx.decision is not None else ()
    prefixes = {
        f"{prefix}.": d.layer
        for d in layers
        if d.layer in on
        and d.layer not in prefused
        and not d.facts.is_mtp
        and (prefix := d.facts.shared_prefix) is not None
    }
    hits: dict[int, list[str]] = {}
    for name, entry in ctx.catalog.tensors.items():
        if tuple(entry.shape) or ".shared_experts." not in name:
            continue
        head = name[: name.index(".shared_experts.") + len(".shared_experts.")]
        if head in prefixes:
            hits.setdefault(prefixes[head], []).append(name)
    if not hits:
        return []
    names = sorted(n for v in hits.values() for n in v)
    return [
        rule.finding(
            layers=sorted(hits),
            tensors=names,
            tensor=names[0],
            target=ctx.target.name,
            details={"scalars": {str(k): sorted(v) for k, v in sorted(hits.items())}},
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
    if "fse_redirect_scalar" in rules:
        out += _scalar_redirect(ctx, rules["fse_redirect_scalar"], on, off)
    if not on or not off:
        return out
    details = {"enabled": on, "disabled": off}
    rule = rules.get("fse_mixed_all_or_nothing")
    if rule is not None and ctx.target.fse == "all_or_nothing":
        for m_on, m_off in mixed_models(ctx.decision).values():
            out.append(
                rule.finding(
                    layers=m_on + m_off,
                    enabled=m_on,
                    disabled=m_off,
                    n_enabled=len(m_on),
                    n_disabled=len(m_off),
                    target=ctx.target.name,
                    details={"enabled": m_on, "disabled": m_off},
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

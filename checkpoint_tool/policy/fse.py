"""Per-layer FSE decisions from the gates, the ``--fse`` mode and the parallelism flags.

Order for one MoE layer: no shared experts -> not applicable; ``--fse off`` -> disabled;
vLLM's gate (``fse_gates``) -> ckpt's layout check (``fse_layout``) -> enabled, the shared
chunk ``j`` going to routed slot ``n_routed + j``. Decisions are per layer: a model may fuse
some layers and not others.

Then the target's rule (``--fse auto`` only): fuse exactly what the ``--target`` engine fuses
when it loads the output. A stock CUDA / CPU vLLM fuses none (FSE is a ROCm AITER feature,
off unless ``VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1``), so every layer stays unfused; an
all-or-nothing engine (0.33 with AITER FSE) fuses every MoE layer *of one model* or none, so
one layer its gate refuses turns FSE off on every layer of that model; a per-layer engine keeps
the per-layer decisions. The main model and its MTP drafter are separate models to vLLM: each
calls ``is_model_fused_shared_expert_compatible`` (``model_executor/layers/fused_moe/utils.py``)
on its own layers (``DeepseekV2Model.__init__`` in ``models/deepseek_v2.py`` on
``self.layers``; ``DeepSeekMTP.__init__`` in ``models/deepseek_mtp.py`` on the
MTP layers; likewise ``qwen3_next.py`` / ``qwen3_next_mtp.py``), so a BF16 MTP layer that cannot
fuse leaves the main model's FSE alone (``fse_model``).
``--fse on`` ignores the target (slots wherever the gates allow; the engine verdict says
which targets load the result).

Then one model-wide rule: with expert parallelism (``--ep``), the EP load balancer
(``--eplb``) or the ``nixl_ep`` all-to-all backend, a layer mix is not supported (the EP
expert map needs one physical expert count for every layer, as in the reference engine). With
``--fse auto`` the mix is resolved by disabling FSE everywhere (a warning); with ``--fse on``
it is an error, as is any layer that cannot fuse.

Example::

    decide_layer(layer, gate=OK, layout=OK, mode="auto")
    # FseDecision(enabled=True, code="ok", source="none", slots=[256], chunk_size=2048)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from checkpoint_tool.model import MoeLayerFacts
from checkpoint_tool.policy.decision import FseDecision, FseMode
from checkpoint_tool.policy.fse_gates import GateResult
from checkpoint_tool.report import Issue

if TYPE_CHECKING:
    from checkpoint_tool.policy.engine.model import Target

OPTION_REASONS: dict[str, str] = {
    "no_shared_experts": "the layer has no shared experts",
    "fse_off": "fused shared experts are turned off (--fse off)",
    "target_no_fse": ("{target} does not fuse shared experts ({why}); they stay a separate MLP"),
    "target_all_or_nothing": (
        "{target} fuses shared experts on every MoE layer or none, and {n_off} layer(s) "
        "cannot fuse, so FSE is off on every layer"
    ),
    "prefused": "the shared experts were already written as routed slots {slots} (config.json ckpt.fse_slots)",
    "parallel_mixed": (
        "mixed per-layer FSE is not supported with {flags}: {n_on} enabled and {n_off} "
        "disabled layers, so FSE is off on every layer"
    ),
}


def decide_layer(
    layer: MoeLayerFacts, *, gate: GateResult, layout: GateResult, mode: FseMode
) -> FseDecision:
    """The FSE decision for one layer (before the model-wide parallelism rule)."""
    if layer.n_shared <= 0:
        return _off("no_shared_experts", OPTION_REASONS["no_shared_experts"], {}, "none")
    if mode == "off":
        return _off("fse_off", OPTION_REASONS["fse_off"], {}, "option")
    for verdict, source in ((gate, "vllm"), (layout, "ckpt")):
        if not verdict.compatible:
            return _off(verdict.code, verdict.template or verdict.code, verdict.params, source)
    return FseDecision(
        enabled=True,
        code="ok",
        source="none",
        slots=[layer.n_routed + j for j in range(layer.n_shared)],
        chunk_size=layer.shared_chunk_size,
    )


def _off(code: str, template: str, params: dict[str, str], source: str) -> FseDecision:
    """A disabled decision. ``reason_template`` is the reason with the layer index in the
    prefix written ``N`` (``... at model.layers.N.mlp.shared_experts``), so layers that fail
    for the same reason share one line in the summary."""
    generic = dict(params)
    if "prefix" in generic:
        generic["prefix"] = generic_prefix(generic["prefix"])
    return FseDecision(
        enabled=False,
        code=code,
        reason=template.format(**params),
        reason_template=template.format(**generic),
        source=source,  # type: ignore[arg-type]
    )


def generic_prefix(prefix: str) -> str:
    """``model.layers.3.mlp.shared_experts`` -> ``model.layers.N.mlp.shared_experts``."""
    return re.sub(r"(^|\.)\d+(\.|$)", r"\1N\2", prefix, count=1)


def parallel_flags(*, ep: bool, eplb: bool, all2all: str | None) -> list[str]:
    """The options under which mixed per-layer FSE is rejected, as the user spelled them."""
    flags = []
    if ep:
        flags.append("--ep")
    if eplb:
        flags.append("--eplb")
    if all2all == "nixl_ep":
        flags.append("--all2all nixl_ep")
    return flags


def prefused_decision(slots: list[int], chunk_size: int) -> FseDecision:
    """A layer whose shared experts a previous ``ckpt convert`` wrote as routed slots."""
    return FseDecision(
        enabled=True,
        code="prefused",
        reason=OPTION_REASONS["prefused"].format(slots=slots),
        source="ckpt",
        slots=list(slots),
        chunk_size=chunk_size,
    )


def fse_model(layer: MoeLayerFacts) -> str:
    """The model whose all-or-nothing FSE state a MoE layer joins: ``"mtp"`` for a layer of the
    MTP drafter, ``"main"`` otherwise (see the module docstring)."""
    return "mtp" if layer.is_mtp else "main"


def by_model(layers: Iterable[int], models: Mapping[int, str] | None) -> dict[str, list[int]]:
    """``layers`` grouped by ``models`` (layer -> ``fse_model``; None or absent: ``"main"``)."""
    out: dict[str, list[int]] = {}
    for k in sorted(layers):
        out.setdefault((models or {}).get(k, "main"), []).append(k)
    return out


def apply_target_rule(
    decisions: dict[int, FseDecision],
    *,
    mode: FseMode,
    target: Target | None,
    models: Mapping[int, str] | None = None,
) -> dict[int, FseDecision]:
    """``--fse auto``: keep only what ``target`` (an engine ``Target``) fuses at load time;
    ``models`` (layer -> ``fse_model``) says which layers share one all-or-nothing state."""
    if mode != "auto" or target is None or target.fse == "per_layer":
        return decisions
    out = dict(decisions)
    movable = {k: d for k, d in decisions.items() if d.enabled and d.code == "ok"}
    if target.fse == "none":
        why = (
            f"stock vLLM on {target.device}: FSE is a ROCm AITER feature, see "
            "--target vllm-0.33-rocm-aiter-fse"
        )
        params = {"target": target.name, "why": why}
        for k in movable:
            out[k] = _off("target_no_fse", OPTION_REASONS["target_no_fse"], params, "target")
        return out
    for group in by_model(decisions, models).values():
        off = [
            k
            for k in group
            if not decisions[k].enabled
            and decisions[k].code not in ("no_shared_experts", "fse_off")
        ]
        if not off:
            continue
        params = {"target": target.name, "n_off": str(len(off))}
        for k in group:
            if k in movable:
                out[k] = _off(
                    "target_all_or_nothing",
                    OPTION_REASONS["target_all_or_nothing"],
                    params,
                    "target",
                )
    return out


def apply_model_rules(
    decisions: dict[int, FseDecision],
    *,
    mode: FseMode,
    ep: bool,
    eplb: bool,
    all2all: str | None,
    target: Target | None = None,
    models: Mapping[int, str] | None = None,
) -> tuple[dict[int, FseDecision], list[Issue]]:
    """Apply the model-wide rules: the target's (``--fse auto``, per model of ``models``),
    parallelism flags against a layer mix, and ``--fse on``."""
    issues: list[Issue] = []
    decisions = apply_target_rule(decisions, mode=mode, target=target, models=models)
    applicable = {
        k: d for k, d in decisions.items() if d.code != "no_shared_experts" and d.source != "target"
    }
    on = sorted(k for k, d in applicable.items() if d.enabled)
    off = sorted(k for k, d in applicable.items() if not d.enabled)
    flags = parallel_flags(ep=ep, eplb=eplb, all2all=all2all)
    out = dict(decisions)
    if flags and on and off:
        params = {"flags": ", ".join(flags), "n_on": str(len(on)), "n_off": str(len(off))}
        text = OPTION_REASONS["parallel_mixed"].format(**params)
        if mode == "on":
            issues.append(
                Issue(
                    severity="error",
                    rule="fse_mixed_under_parallelism",
                    message=f"--fse on: {text}; layers {on} can fuse, layers {off} cannot; "
                    f"drop {', '.join(flags)} or use --fse auto",
                )
            )
        else:
            issues.append(
                Issue(
                    severity="warning",
                    rule="fse_mixed_under_parallelism",
                    message=f"{text}; layers {on} could fuse on their own (drop "
                    f"{', '.join(flags)} to fuse them)",
                )
            )
        for k in on:
            out[k] = _off("parallel_mixed", OPTION_REASONS["parallel_mixed"], params, "option")
    if mode == "on":
        groups: dict[str, list[int]] = {}
        for k, d in sorted(decisions.items()):
            if d.code not in ("no_shared_experts", "ok") and not d.enabled:
                groups.setdefault(d.reason_template or d.code, []).append(k)
        for template, layers in groups.items():
            issues.append(
                Issue(
                    severity="error",
                    rule="fse_required",
                    message=f"--fse on: MoE layer(s) {layers} cannot fuse their shared "
                    f"experts: {template}",
                )
            )
    return out, issues

"""Scheme-detection rules: would vLLM build a Quark layer from the spec it matches?

For every vLLM layer (linear module, or FusedMoE layer for routed experts) the spec vLLM
picks (``QuarkConfig.vllm_match``, vLLM's name matching) goes through ``quark_detect``;
layers refused for the same reason and spec are folded into one finding. Output-tensor specs
of ``kv_cache_group`` entries are dropped first, as ``QuarkConfig.from_config`` does.

Example::

    check_schemes(ctx, table)
    # [EngineFinding(rule='quark_moe_scheme_unsupported', layers=[1, 2, 3], ...)]
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .context import EngineContext
from .model import EngineFinding, RuleSpec
from .quark_detect import Detection, detect_linear, detect_moe, spec_text

if TYPE_CHECKING:
    from checkpoint_tool.quant.configs import QuarkConfig
    from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec

SCHEME_RULES = (
    "quark_output_or_bias_quant",
    "quark_fp8_block_size_missing",
    "quark_linear_scheme_unsupported",
    "quark_linear_multi_entry",
    "quark_moe_scheme_unsupported",
    "quark_moe_fp8_scales_unsupported",
    "quark_moe_fp8_block_e8m0",
    "quark_moe_w4a8_rocm_only",
)


def matched_key(qconfig: QuarkConfig, spec: QuarkLayerSpec | None) -> tuple[str, str | None]:
    """Which config field (and key) a spec returned by ``vllm_match``/``producer_match`` is."""
    if spec is None:
        return "exclude", None
    for key, value in qconfig.layer_quant_config.items():
        if value is spec:
            return "layer_quant_config", key
    for key, value in qconfig.layer_type_quant_config.items():
        if value is spec:
            return "layer_type_quant_config", key
    return "global_quant_config", None


def _kv_stripped_keys(ctx: EngineContext) -> set[str]:
    """layer_quant_config keys whose output_tensors vLLM drops (KV-cache groups, ``*q_proj``)."""
    export = (ctx.raw_qc or {}).get("export")
    groups = export.get("kv_cache_group") if isinstance(export, dict) else None
    if not isinstance(groups, list) or not groups:
        return set()
    keys = set(ctx.quark.layer_quant_config)
    out = {k for k in keys if any(fnmatch.fnmatchcase(k, g) for g in groups)}
    return out | ({"*q_proj"} & keys)


def _detect(ctx: EngineContext, layer: str, stripped: set[str]) -> tuple[Detection, dict | None]:
    module = ctx.vllm_layers[layer][0]
    spec, _rule = ctx.quark.vllm_match(module)
    raw = spec.raw() if spec is not None else None
    if raw is not None:
        field, key = matched_key(ctx.quark, spec)
        if field == "layer_quant_config" and key in stripped:
            raw = {**raw, "output_tensors": None}
    moe = ctx.is_moe_layer(layer)
    export = (ctx.raw_qc or {}).get("export")
    pack = export.get("pack_method") if isinstance(export, dict) else None
    return (detect_moe(raw, pack) if moe else detect_linear(raw, pack)), raw


def check_schemes(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """All scheme-detection findings for the active ``rules`` (rule id -> spec)."""
    if not ctx.is_quark:
        return []
    stripped = _kv_stripped_keys(ctx)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for layer in ctx.vllm_layers:
        det, raw = _detect(ctx, layer, stripped)
        if det.rule is None or det.rule not in rules:
            continue
        key = (det.rule, json.dumps(raw, sort_keys=True, default=str))
        g = groups.setdefault(key, {"layers": [], "moe": [], "det": det, "raw": raw or {}})
        g["layers"].append(layer)
        idx = ctx.moe_layer_index(layer)
        if idx is not None:
            g["moe"].append(idx)
    out = []
    for (rule_id, _), g in sorted(groups.items(), key=lambda kv: kv[0]):
        rule, raw, det = rules[rule_id], g["raw"], g["det"]
        params = {
            "count": len(g["layers"]),
            "spec": spec_text(raw),
            "weight": raw.get("weight"),
            "input": raw.get("input_tensors"),
            "rule": "",
            "what": "",
            "why": "",
            **det.params,
        }
        params["rule"] = _first_rule(ctx, g["layers"][0])
        out.append(
            rule.finding(
                modules=g["layers"],
                layers=g["moe"],
                details={"spec": raw},
                **params,
            )
        )
    return out


def _first_rule(ctx: EngineContext, layer: str) -> str:
    return ctx.quark.vllm_match(ctx.vllm_layers[layer][0])[1]


CHECKS: dict[str, Callable[..., list[EngineFinding]]] = {}

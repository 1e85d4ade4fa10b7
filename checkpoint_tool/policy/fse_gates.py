"""vLLM's FSE compatibility gates, mirrored: may a layer's shared expert join the routed GEMM?

This mirrors ``is_shared_expert_quant_fse_compatible`` in vLLM's
``vllm/model_executor/layers/quantization/utils/config_utils.py`` (0.33), branch by branch,
and returns its reason strings **verbatim** (``{prefix}`` is the shared-expert module):

- no quantization config -> compatible;
- DeepSeek-V4 (``DeepseekV4FP8Config``, any DSV4 model): routed experts must be fp4, the
  config must be a Quark MXFP4 export, the shared expert not excluded (``startswith``) and
  its ``w1`` spec (exact key, then ``re:`` keys by fullmatch, then global) must be fp4;
- Quark: no shared projection excluded; every shared projection shard's spec equal (dict
  equality) to the routed experts' spec;
- FP8 (``Fp8Config``, DeepSeek native): ``weight_block_size`` required; routed and shared
  ignored alike;
- anything else (ModelOpt, ...): "not implemented for <vLLM class>".

Example::

    gate_result = vllm_fse_gate(qconfig, raw_qc, facts, facts.layer(3))
    gate_result.compatible, gate_result.text
    # (False, 'Quark excludes shared experts at model.layers.3.mlp.shared_experts')
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    NoQuantConfig,
    QuarkConfig,
)

#: code -> reason template, exactly as vLLM words it
VLLM_REASONS: dict[str, str] = {
    "dsv4_routed_not_mxfp4": "DeepSeek-V4 routed experts are not MXFP4",
    "dsv4_no_quant_config": "DeepSeek-V4 has no quantization configuration",
    "dsv4_not_quark_mxfp4": "DeepSeek-v4 FSE is only implemented/tested with Quark MXFP4",
    "dsv4_excludes_shared": "DeepSeek-V4 excludes shared experts at {prefix}",
    "dsv4_shared_not_mxfp4": "DeepSeek-V4 shared experts at {prefix} are not MXFP4",
    "quark_excludes_shared": "Quark excludes shared experts at {prefix}",
    "quark_different_configs": (
        "Quark uses different quantization configurations for routed and shared experts at {prefix}"
    ),
    "fp8_not_block": ("FP8 shared-expert FSE is only implemented for block-quantized checkpoints"),
    "fp8_ignores_inconsistently": (
        "FP8 ignores routed and shared experts inconsistently at {prefix}"
    ),
    "not_implemented": (
        "shared-expert FSE quantization compatibility is not implemented for {config_class}"
    ),
}


class GateResult(NamedTuple):
    """A gate's verdict: ``code`` is "ok" or a key of a reason table; ``params`` fill it."""

    compatible: bool
    code: str
    template: str | None = None
    params: dict[str, str] = {}

    @property
    def text(self) -> str | None:
        """The reason with its parameters filled in (None when compatible)."""
        return None if self.template is None else self.template.format(**self.params)


OK = GateResult(True, "ok")


def _no(code: str, **params: str) -> GateResult:
    return GateResult(False, code, VLLM_REASONS[code], params)


def vllm_fse_gate(
    qconfig: Any,
    raw_qc: dict[str, Any] | None,
    facts: ModelFacts,
    layer: MoeLayerFacts,
) -> GateResult:
    """vLLM's verdict for one MoE layer with shared experts (see the module docstring).

    ``qconfig`` is the loaded config model (``checkpoint_tool.quant.configs``), ``raw_qc`` the
    ``quantization_config`` dict of config.json (the DSV4 gate reads it raw, as vLLM does).
    """
    if qconfig is None or isinstance(qconfig, NoQuantConfig):
        return OK
    if facts.family == "deepseek_v4":
        return dsv4_gate(raw_qc, facts, layer)
    if isinstance(qconfig, QuarkConfig):
        return quark_gate(qconfig, layer)
    if isinstance(qconfig, (DeepSeekFp8Config, DeepSeekV4Config)):
        return fp8_gate(qconfig, layer)
    return _no("not_implemented", config_class=vllm_class_name(qconfig))


def vllm_class_name(qconfig: Any) -> str:
    """The vLLM quantization config class that would load this checkpoint."""
    if isinstance(qconfig, ModelOptConfig):
        return "ModelOptNvFp4Config" if qconfig.quant_algo == "NVFP4" else "ModelOptFp8Config"
    if isinstance(qconfig, QuarkConfig):
        return "QuarkConfig"
    if isinstance(qconfig, DeepSeekV4Config):
        return "DeepseekV4FP8Config"
    if isinstance(qconfig, DeepSeekFp8Config):
        return "Fp8Config"
    return type(qconfig).__name__


def shared_shard_modules(layer: MoeLayerFacts) -> list[str]:
    """The checkpoint modules behind vLLM's ``{shared}.gate_up_proj`` and ``{shared}.down_proj``
    (the packed gate/up shards resolved one by one)."""
    return layer.shared_modules()


def quark_gate(cfg: QuarkConfig, layer: MoeLayerFacts) -> GateResult:
    """Quark branch: exclusion of any shared projection, then spec equality shard by shard."""
    prefix = layer.shared_prefix or ""
    shards = shared_shard_modules(layer)
    if any(cfg.vllm_match(m)[0] is None for m in shards):
        return _no("quark_excludes_shared", prefix=prefix)
    routed, _ = cfg.vllm_match(layer.routed_prefix)
    routed_raw = _raw(routed)
    if all(_raw(cfg.vllm_match(m)[0]) == routed_raw for m in shards):
        return OK
    return _no("quark_different_configs", prefix=prefix)


def fp8_gate(cfg: DeepSeekFp8Config | DeepSeekV4Config, layer: MoeLayerFacts) -> GateResult:
    """FP8 branch: block quantization required, routed and shared ignored alike."""
    prefix = layer.shared_prefix or ""
    if cfg.weight_block_size is None:
        return _no("fp8_not_block")
    routed_ignored = not cfg.scheme_for(layer.routed_module(0, "gate")).quantized
    for m in shared_shard_modules(layer):
        if (not cfg.scheme_for(m).quantized) != routed_ignored:
            return _no("fp8_ignores_inconsistently", prefix=prefix)
    return OK


def dsv4_prefix(facts: ModelFacts, layer: MoeLayerFacts) -> str:
    """vLLM's DSV4 shared-expert prefix: ``layers.{i}.ffn.shared_experts`` or, for MTP layers
    (index >= num_hidden_layers), ``mtp.{i - num_hidden_layers}.ffn.shared_experts``."""
    if layer.layer >= facts.num_hidden_layers:
        return f"mtp.{layer.layer - facts.num_hidden_layers}.ffn.shared_experts"
    return f"layers.{layer.layer}.ffn.shared_experts"


def is_quark_mxfp4_ocp(raw_qc: dict[str, Any]) -> bool:
    """vLLM's ``DeepseekV4FP8Config._is_quark_mxfp4_ocp``: global weight fp4 per_group 32."""
    weight = (raw_qc.get("global_quant_config") or {}).get("weight")
    if not isinstance(weight, dict):
        return False
    return (
        weight.get("dtype") == "fp4"
        and weight.get("qscheme") == "per_group"
        and weight.get("group_size") == 32
    )


def dsv4_expert_dtype(facts: ModelFacts, raw_qc: dict[str, Any] | None) -> str | None:
    """config.json's ``expert_dtype``; a Quark MXFP4 export without it counts as fp4."""
    if facts.expert_dtype:
        return facts.expert_dtype
    if raw_qc and raw_qc.get("quant_method") == "quark" and is_quark_mxfp4_ocp(raw_qc):
        return "fp4"
    return None


def dsv4_gate(raw_qc: dict[str, Any] | None, facts: ModelFacts, layer: MoeLayerFacts) -> GateResult:
    """DeepSeek-V4 branch, reading config.json's ``quantization_config`` as vLLM does."""
    if dsv4_expert_dtype(facts, raw_qc) != "fp4":
        return _no("dsv4_routed_not_mxfp4")
    if raw_qc is None:
        return _no("dsv4_no_quant_config")
    if not is_quark_mxfp4_ocp(raw_qc):
        return _no("dsv4_not_quark_mxfp4")
    prefix = dsv4_prefix(facts, layer)
    if any(isinstance(e, str) and e.startswith(prefix) for e in raw_qc.get("exclude") or []):
        return _no("dsv4_excludes_shared", prefix=prefix)
    w1 = f"{prefix}.w1"
    layer_cfg = raw_qc.get("layer_quant_config") or {}
    spec = layer_cfg.get(w1)
    if spec is None:
        spec = next(
            (
                cfg
                for key, cfg in layer_cfg.items()
                if isinstance(key, str)
                and key.startswith("re:")
                and re.fullmatch(key.removeprefix("re:"), w1)
            ),
            None,
        )
    weight = (spec or raw_qc.get("global_quant_config") or {}).get("weight") or {}
    if isinstance(weight, dict) and weight.get("dtype") == "fp4":
        return OK
    return _no("dsv4_shared_not_mxfp4", prefix=prefix)


def _raw(spec: Any) -> Any:
    """A Quark spec as the plain dict vLLM compares (None stays None)."""
    raw = getattr(spec, "raw", None)
    return raw() if callable(raw) else spec

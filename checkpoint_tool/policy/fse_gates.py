"""vLLM's FSE compatibility gate, mirrored: may a layer's shared expert join the routed GEMM?

This mirrors ``is_shared_expert_quant_fse_compatible`` in vLLM's
``vllm/model_executor/layers/quantization/utils/config_utils.py``, branch by branch in vLLM's
order, per target version, and returns its reason strings **verbatim** (``{prefix}`` is the
shared-expert module). It reads the raw ``quantization_config`` as vLLM does
(``policy.vllm_names``). The branch is chosen by the vLLM config *class* that would load the
checkpoint (``vllm_class_name``), not by the model family:

- no quantization config -> compatible;
- ``DeepseekV4FP8Config`` (quant_method fp8 / deepseek_v4_fp8 on ``model_type: deepseek_v4``;
  ``expert_dtype`` missing means fp4, ``deepseek_v4/quant_config.py``): 0.32 takes the DSV4
  branch for any expert dtype ("routed experts are not MXFP4" when not fp4); 0.33 only when
  fp4, fp8 experts fall through to the ``Fp8Config`` branch (its subclass). The DSV4 branch:
  config.json's quantization_config must be a Quark MXFP4 export, the shared expert not
  excluded (``startswith``) and its ``w1`` spec fp4. 0.33 says "DeepSeek-V4/V4.1 ...";
- ``QuarkConfig`` (a DeepSeek-V4 Quark export too): no shared projection excluded
  (``should_ignore_layer``; shards that disagree raise), and every shared projection shard's
  ``layer_quant_config`` entry (or global) equal to the routed experts' entry (or global);
- ``Fp8Config``: no ``store_dtype``, ``weight_block_size`` required, routed and shared
  ignored alike (``is_layer_skipped``);
- anything else (ModelOpt NVFP4 / FP8, ...): "not implemented for <vLLM class>".

Example::

    gate_result = vllm_fse_gate(qconfig, raw_qc, facts, facts.layer(3))
    gate_result.compatible, gate_result.text
    # (False, 'Quark excludes shared experts at model.layers.3.mlp.shared_experts')
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.policy.vllm_names import (
    VllmRaises,
    fp8_skipped,
    quark_ignored,
    quark_layer_config,
)
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    NoQuantConfig,
    QuarkConfig,
)
from checkpoint_tool.quant.configs.quark_record import QuarkLayer, QuarkTensor

if TYPE_CHECKING:
    from checkpoint_tool.quant.configs import QuantConfig

#: code -> reason template, exactly as vLLM 0.33 words it
VLLM_REASONS: dict[str, str] = {
    "dsv4_no_quant_config": "DeepSeek-V4/V4.1 has no quantization configuration",
    "dsv4_not_quark_mxfp4": "DeepSeek-V4/V4.1 FSE is only implemented/tested with Quark MXFP4",
    "dsv4_excludes_shared": "DeepSeek-V4/V4.1 excludes shared experts at {prefix}",
    "dsv4_shared_not_mxfp4": "DeepSeek-V4/V4.1 shared experts at {prefix} are not MXFP4",
    "quark_excludes_shared": "Quark excludes shared experts at {prefix}",
    "quark_different_configs": (
        "Quark uses different quantization configurations for routed and shared experts at {prefix}"
    ),
    "fp8_store_dtype": (
        "FP8 stores routed experts as {store_dtype}, which is not supported for fused shared "
        "experts at {prefix}"
    ),
    "fp8_not_block": ("FP8 shared-expert FSE is only implemented for block-quantized checkpoints"),
    "fp8_ignores_inconsistently": (
        "FP8 ignores routed and shared experts inconsistently at {prefix}"
    ),
    "not_implemented": (
        "shared-expert FSE quantization compatibility is not implemented for {config_class}"
    ),
    "vllm_raises": "{error}",
}

#: vLLM 0.32's wording where it differs (same codes); 0.32-only codes
VLLM_032_REASONS: dict[str, str] = {
    "dsv4_routed_not_mxfp4": "DeepSeek-V4 routed experts are not MXFP4",
    "dsv4_no_quant_config": "DeepSeek-V4 has no quantization configuration",
    "dsv4_not_quark_mxfp4": "DeepSeek-v4 FSE is only implemented/tested with Quark MXFP4",
    "dsv4_excludes_shared": "DeepSeek-V4 excludes shared experts at {prefix}",
    "dsv4_shared_not_mxfp4": "DeepSeek-V4 shared experts at {prefix} are not MXFP4",
}

#: vLLM's projection names for the shared MLP (the gate's default ``projection_names``)
PROJECTIONS = ("gate_up_proj", "down_proj")


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


def model_no_fse(reason: str) -> GateResult:
    """The verdict for every layer of a model whose vLLM class never fuses its shared expert
    (the family table's ``fse.supported: false``, e.g. Llama-4: ``llama4.py`` ``Llama4MoE``
    hands ``shared_expert`` to FusedMoE as a separate module, with no fused slots)."""
    return GateResult(False, "model_no_fse", "{reason}", {"reason": reason})


def _version(version: Any) -> tuple[int, ...]:
    if version is None:
        return (0, 33)
    if isinstance(version, str):
        return tuple(int(p) for p in version.split("."))
    return tuple(version)


def _no(code: str, version: tuple[int, ...] = (0, 33), **params: str) -> GateResult:
    table = {**VLLM_REASONS, **VLLM_032_REASONS} if version < (0, 33) else VLLM_REASONS
    return GateResult(False, code, table[code], params)


def vllm_fse_gate(
    qconfig: QuantConfig,
    raw_qc: dict[str, Any] | None,
    facts: ModelFacts,
    layer: MoeLayerFacts,
    version: Any = None,
) -> GateResult:
    """vLLM's verdict for one MoE layer with shared experts (see the module docstring).

    ``qconfig`` is the loaded config model (``checkpoint_tool.quant.configs``), ``raw_qc`` the
    ``quantization_config`` dict of config.json; ``version`` the target engine version
    (``"0.32.0"``; None: 0.33). Where vLLM raises, the result is ``vllm_raises`` with its text.
    """
    v = _version(version)
    if qconfig is None or isinstance(qconfig, NoQuantConfig):
        return OK
    raw = raw_qc or {}
    try:
        if isinstance(qconfig, DeepSeekV4Config):
            if v < (0, 33) or facts.expert_dtype in (None, "fp4"):
                return dsv4_gate(raw_qc, facts, layer, v)
            return fp8_gate(raw, layer, v)
        if isinstance(qconfig, QuarkConfig):
            return quark_gate(raw, layer, v)
        if isinstance(qconfig, DeepSeekFp8Config):
            return fp8_gate(raw, layer, v)
    except VllmRaises as exc:
        return _no("vllm_raises", v, error=str(exc))
    return _no("not_implemented", v, config_class=vllm_class_name(qconfig))


def vllm_class_name(qconfig: QuantConfig) -> str:
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


def quark_gate(raw: dict[str, Any], layer: MoeLayerFacts, v: tuple[int, ...]) -> GateResult:
    """Quark branch: exclusion of any shared projection, then entry equality shard by shard."""
    prefix = layer.shared_prefix or ""
    exclude = [e for e in raw.get("exclude") or [] if isinstance(e, str)]
    if any(quark_ignored(f"{prefix}.{p}", exclude) for p in PROJECTIONS):
        return _no("quark_excludes_shared", v, prefix=prefix)
    lqc = raw.get("layer_quant_config") or {}
    lqc = lqc if isinstance(lqc, dict) else {}
    glob = raw.get("global_quant_config")
    routed = quark_layer_config(layer.routed_prefix, lqc) or glob
    shards = [
        quark_layer_config(f"{prefix}.{s}", lqc) or glob
        for p in PROJECTIONS
        for s in ({"gate_up_proj": ["gate_proj", "up_proj"]}.get(p, [p]))
    ]
    if all(s == routed for s in shards):
        return OK
    return _no("quark_different_configs", v, prefix=prefix)


def fp8_gate(raw: dict[str, Any], layer: MoeLayerFacts, v: tuple[int, ...]) -> GateResult:
    """Fp8Config branch: no store_dtype, block quantization, routed and shared ignored alike."""
    prefix = layer.shared_prefix or ""
    store = raw.get("store_dtype")
    if store is not None:
        return _no("fp8_store_dtype", v, store_dtype=str(store), prefix=prefix)
    if raw.get("weight_block_size") is None:
        return _no("fp8_not_block", v)
    ignored = raw.get("ignored_layers") or raw.get("modules_to_not_convert") or []
    ignored = [e for e in ignored if isinstance(e, str)]
    routed = fp8_skipped(layer.routed_prefix, ignored)
    if any(fp8_skipped(f"{prefix}.{p}", ignored) != routed for p in PROJECTIONS):
        return _no("fp8_ignores_inconsistently", v, prefix=prefix)
    return OK


def dsv4_prefix(facts: ModelFacts, layer: MoeLayerFacts) -> str:
    """vLLM's DSV4 shared-expert prefix: ``layers.{i}.ffn.shared_experts`` or, for MTP layers
    (index >= num_hidden_layers), ``mtp.{i - num_hidden_layers}.ffn.shared_experts``."""
    if layer.layer >= facts.num_hidden_layers:
        return f"mtp.{layer.layer - facts.num_hidden_layers}.ffn.shared_experts"
    return f"layers.{layer.layer}.ffn.shared_experts"


def is_quark_mxfp4_ocp(raw_qc: dict[str, Any]) -> bool:
    """vLLM's ``DeepseekV4FP8Config._is_quark_mxfp4_ocp`` (models/deepseek_v4/quant_config.py):
    the global weight, written as one dict, is fp4 per_group 32."""
    weight = _plain_weight(raw_qc.get("global_quant_config"))
    if weight is None:
        return False
    return weight.dtype == "fp4" and weight.qscheme == "per_group" and weight.group_size == 32


def _plain_weight(spec: Any) -> QuarkTensor | None:
    """The ``weight`` of a Quark layer spec when written as one dict (vLLM's
    ``isinstance(weight, dict)``), read by ``quark_record``."""
    slot = QuarkLayer.parse(spec or {}).weight
    return slot.plain if slot is not None else None


def dsv4_gate(
    raw_qc: dict[str, Any] | None,
    facts: ModelFacts,
    layer: MoeLayerFacts,
    v: tuple[int, ...] = (0, 33),
) -> GateResult:
    """DeepSeek-V4 branch, reading config.json's ``quantization_config`` as vLLM does."""
    if v < (0, 33) and (facts.expert_dtype or "fp4") != "fp4":
        return _no("dsv4_routed_not_mxfp4", v)
    if raw_qc is None:
        return _no("dsv4_no_quant_config", v)
    if not is_quark_mxfp4_ocp(raw_qc):
        return _no("dsv4_not_quark_mxfp4", v)
    prefix = dsv4_prefix(facts, layer)
    if any(isinstance(e, str) and e.startswith(prefix) for e in raw_qc.get("exclude") or []):
        return _no("dsv4_excludes_shared", v, prefix=prefix)
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
    weight = _plain_weight(spec or raw_qc.get("global_quant_config"))
    if weight is not None and weight.dtype == "fp4":
        return OK
    return _no("dsv4_shared_not_mxfp4", v, prefix=prefix)

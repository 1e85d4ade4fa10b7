"""Presets of compressed-tensors exports (``quant_method: compressed-tensors``, llm-compressor).

- ``kimi-k2-int4``: moonshotai/Kimi-K2-Thinking's layout on the DeepSeek-V3 architecture:
  routed experts INT4 ``pack-quantized`` (``weight_packed`` I32, BF16 ``weight_scale`` per 32,
  ``weight_shape``), everything else BF16 and ``ignore``d by regex, no MTP layer.
- ``qwen3-moe-fp8-dynamic``: RedHatAI's Qwen3-MoE FP8-dynamic layout: every linear FP8 with a
  BF16 per-channel ``weight_scale`` ``[out, 1]``, dynamic per-token activations; lm_head and the
  routers ignored.
- ``qwen3-moe-nvfp4``: RedHatAI's Qwen3-MoE NVFP4 layout: ``weight_packed`` U8, F8_E4M3
  ``weight_scale`` per 16, F32 ``weight_global_scale`` and ``input_global_scale`` ``[1]``.
- ``qwen3-moe-w4a16``: RedHatAI's Qwen3-MoE ``quantized.w4a16`` layout: INT4 groups of 128.

Example::

    layout = PRESETS["kimi-k2-int4"].build(PRESETS["kimi-k2-int4"].tiny, PresetOptions())
    layout.config["quantization_config"]["format"]   # 'pack-quantized'
"""

from __future__ import annotations

import copy
from typing import Any

from checkpoint_tool.synth.dims import (
    DEEPSEEK_V3_FULL,
    DEEPSEEK_V3_TINY,
    QWEN3_MOE_FULL,
    QWEN_MOE_TINY,
    Dims,
)
from checkpoint_tool.synth.expand import expand
from checkpoint_tool.synth.families.deepseek_v3 import deepseek_v3_config, deepseek_v3_items
from checkpoint_tool.synth.families.qwen_moe import qwen_moe_config, qwen_moe_items
from checkpoint_tool.synth.layout import Linear, SynthLayout
from checkpoint_tool.synth.presets.base import PresetOptions, PresetSpec

_WEIGHT_INT4 = {
    "num_bits": 4,
    "type": "int",
    "symmetric": True,
    "strategy": "group",
    "dynamic": False,
    "actorder": None,
    "block_structure": None,
    "observer": "minmax",
    "observer_kwargs": {},
}
_FP8_WEIGHT = {
    "num_bits": 8,
    "type": "float",
    "symmetric": True,
    "strategy": "channel",
    "dynamic": False,
    "group_size": None,
    "actorder": None,
    "block_structure": None,
    "observer": "minmax",
    "observer_kwargs": {},
}
_FP8_TOKEN = {
    "num_bits": 8,
    "type": "float",
    "symmetric": True,
    "strategy": "token",
    "dynamic": True,
    "group_size": None,
    "actorder": None,
    "block_structure": None,
    "observer": None,
    "observer_kwargs": {},
}
_NVFP4 = {
    "num_bits": 4,
    "type": "float",
    "symmetric": True,
    "strategy": "tensor_group",
    "group_size": 16,
    "actorder": None,
    "block_structure": None,
    "observer": "minmax",
    "observer_kwargs": {},
}


def ct_config(fmt: str, weights: dict, inputs: dict | None, ignore: list[str]) -> dict[str, Any]:
    """A compressed-tensors ``quantization_config`` with one ``Linear`` group, as
    llm-compressor writes it."""
    return {
        "config_groups": {
            "group_0": {
                "input_activations": copy.deepcopy(inputs),
                "output_activations": None,
                "targets": ["Linear"],
                "weights": copy.deepcopy(weights),
            }
        },
        "format": fmt,
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }


#: moonshotai/Kimi-K2-Thinking config.json ``quantization_config``
KIMI_K2_THINKING_QUANT_CONFIG = ct_config(
    "pack-quantized",
    {**_WEIGHT_INT4, "group_size": 32},
    None,
    [
        "lm_head",
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
    ],
)
#: RedHatAI Qwen3-MoE exports: lm_head and the routers stay BF16
_QWEN_IGNORE = ["lm_head", "re:.*mlp.gate$"]
QWEN3_FP8_DYNAMIC_QUANT_CONFIG = ct_config("float-quantized", _FP8_WEIGHT, _FP8_TOKEN, _QWEN_IGNORE)
QWEN3_NVFP4_QUANT_CONFIG = ct_config(
    "nvfp4-pack-quantized", _NVFP4, {**_NVFP4, "dynamic": "local"}, _QWEN_IGNORE
)
QWEN3_W4A16_QUANT_CONFIG = ct_config(
    "pack-quantized", {**_WEIGHT_INT4, "group_size": 128}, None, _QWEN_IGNORE
)

_QWEN_BF16_ROLES = ("router", "router_aux", "lm_head")


def build_kimi_k2_int4(d: Dims, opts: PresetOptions) -> SynthLayout:
    d = d.model_copy(update={"mtp_layers": 0})
    items = list(deepseek_v3_items(d, router_bias_dtype="F32", mtp=False))
    config = deepseek_v3_config(d, copy.deepcopy(KIMI_K2_THINKING_QUANT_CONFIG))
    config.update({"model_type": "kimi_k2", "n_group": 1, "topk_group": 1})
    return SynthLayout(
        config=config,
        tensors=expand(items, lambda lin: "ct_int4_g32" if lin.role == "routed" else "bf16"),
        default_shards=d.shards,
    )


def _qwen3(encoding: str, qcfg: dict[str, Any]) -> Any:
    def build(d: Dims, opts: PresetOptions) -> SynthLayout:
        def assign(lin: Linear) -> str:
            return "bf16" if lin.role in _QWEN_BF16_ROLES else encoding

        return SynthLayout(
            config=qwen_moe_config(d, 3, copy.deepcopy(qcfg)),
            tensors=expand(list(qwen_moe_items(d, 3)), assign),
            default_shards=d.shards,
        )

    return build


_QWEN3_TINY = QWEN_MOE_TINY.model_copy(update={"n_shared": 0})

CT_PRESETS = [
    PresetSpec(
        name="kimi-k2-int4",
        summary="compressed-tensors INT4 (Kimi-K2-Thinking): pack-quantized routed experts, "
        "group 32, BF16 attention / shared experts / dense MLP ignored by regex",
        family="deepseek_v3",
        producer="compressed-tensors",
        tiny=DEEPSEEK_V3_TINY,
        full=DEEPSEEK_V3_FULL,
        build=build_kimi_k2_int4,
    ),
    PresetSpec(
        name="qwen3-moe-fp8-dynamic",
        summary="compressed-tensors FP8 dynamic Qwen3-MoE (RedHatAI): per-channel BF16 scales "
        "[out, 1], per-token dynamic activations",
        family="qwen3_moe",
        producer="compressed-tensors",
        tiny=_QWEN3_TINY,
        full=QWEN3_MOE_FULL,
        build=_qwen3("ct_fp8_channel", QWEN3_FP8_DYNAMIC_QUANT_CONFIG),
    ),
    PresetSpec(
        name="qwen3-moe-nvfp4",
        summary="compressed-tensors NVFP4 Qwen3-MoE (RedHatAI): weight_packed, weight_global_scale "
        "and input_global_scale [1], gate/up sharing their global scale",
        family="qwen3_moe",
        producer="compressed-tensors",
        tiny=_QWEN3_TINY,
        full=QWEN3_MOE_FULL,
        build=_qwen3("ct_nvfp4", QWEN3_NVFP4_QUANT_CONFIG),
    ),
    PresetSpec(
        name="qwen3-moe-w4a16",
        summary="compressed-tensors W4A16 Qwen3-MoE (RedHatAI quantized.w4a16): INT4 "
        "pack-quantized, groups of 128",
        family="qwen3_moe",
        producer="compressed-tensors",
        tiny=_QWEN3_TINY,
        full=QWEN3_MOE_FULL,
        build=_qwen3("ct_int4_g128", QWEN3_W4A16_QUANT_CONFIG),
    ),
]

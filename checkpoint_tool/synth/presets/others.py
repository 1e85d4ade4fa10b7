"""Presets of the DeepSeek-V4 and Qwen3.5-MoE architectures.

- ``deepseek-v4``: DeepSeek-V4 native (V4-Flash layout): FP8 block linears with ue8m0 scales in
  ``.scale`` (F8_E8M0), FP4 routed experts packed in I8 with E8M0 scales per 32, FP8 block
  shared experts, BF16 compressors / indexer weights_proj / router / head, F32 hyper-connection
  parameters, ``mtp.0.*``, engram tables on ``engram_layer_ids``, ``expert_dtype: "fp4"``.
- ``qwen2-moe`` / ``qwen3-moe``: BF16 Qwen1.5-MoE-style (shared expert + ``shared_expert_gate``,
  q/k/v biases) and Qwen3-MoE-style (``q_norm``/``k_norm``, no shared expert) checkpoints as
  transformers 4.x saves them; ``synth.families.qwen_moe.transformers5_config`` gives the
  transformers-5 spelling of the same config (``num_local_experts``).
- ``qwen3.5-moe-mxfp4``: Quark MXFP4 export of Qwen3.5-MoE: per-expert MXFP4 routed and shared
  experts; attention (full and linear, ``conv1d`` included), routers, ``shared_expert_gate`` and
  lm_head stay BF16 and are listed in ``exclude`` by exact name.
"""

from __future__ import annotations

from checkpoint_tool.errors import UsageError
from checkpoint_tool.synth.dims import (
    DEEPSEEK_V4_FULL,
    DEEPSEEK_V4_TINY,
    QWEN2_MOE_FULL,
    QWEN3_5_MOE_FULL,
    QWEN3_5_MOE_TINY,
    QWEN3_MOE_FULL,
    QWEN_MOE_TINY,
    Dims,
)
from checkpoint_tool.synth.expand import expand
from checkpoint_tool.synth.families.deepseek_v4 import deepseek_v4_config, deepseek_v4_items
from checkpoint_tool.synth.families.gpt_oss import GPT_OSS_FULL, GPT_OSS_TINY, build_gpt_oss
from checkpoint_tool.synth.families.qwen3_5_moe import qwen3_5_moe_config, qwen3_5_moe_items
from checkpoint_tool.synth.families.qwen_moe import qwen_moe_config, qwen_moe_items
from checkpoint_tool.synth.layout import Linear, Plain, SynthLayout
from checkpoint_tool.synth.presets.base import PresetOptions, PresetSpec
from checkpoint_tool.synth.quark import quark_config

#: deepseek-ai/DeepSeek-V4-Flash config.json ``quantization_config``
DEEPSEEK_V4_QUANT_CONFIG = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}

_V4_ENCODING = {
    "attn": "deepseek_v4_fp8_block",
    "shared": "deepseek_v4_fp8_block",
    "mtp_proj": "deepseek_v4_fp8_block",
    "routed": "deepseek_v4_mxfp4",
    "engram": "deepseek_v4_engram",
}


def build_deepseek_v4(d: Dims, opts: PresetOptions) -> SynthLayout:
    items = list(deepseek_v4_items(d))
    tensors = expand(items, lambda lin: _V4_ENCODING.get(lin.role, "bf16"))
    return SynthLayout(
        config=deepseek_v4_config(d, dict(DEEPSEEK_V4_QUANT_CONFIG)),
        tensors=tensors,
        default_shards=d.shards,
    )


def build_qwen3_5_moe_mxfp4(d: Dims, opts: PresetOptions) -> SynthLayout:
    items = list(qwen3_5_moe_items(d))

    def assign(lin: Linear) -> str:
        return "quark_mxfp4" if lin.role in ("routed", "shared") else "bf16"

    exclude = [it.module for it in items if isinstance(it, Linear) and assign(it) == "bf16"]
    # the gated delta-net conv1d is a Conv1d, not a Linear; listing it keeps every resolver
    # (Quark's and vLLM's name matching) from applying the global MXFP4 spec to its weight
    exclude += [
        it.name.removesuffix(".weight")
        for it in items
        if isinstance(it, Plain) and it.name.endswith(".conv1d.weight")
    ]
    qcfg = quark_config(global_spec="mxfp4", exclude=exclude)
    return SynthLayout(
        config=qwen3_5_moe_config(d, qcfg),
        tensors=expand(items, assign),
        default_shards=d.shards,
    )


def build_qwen_moe(d: Dims, opts: PresetOptions, *, version: int) -> SynthLayout:
    if version == 3 and d.n_shared:
        raise UsageError("qwen3-moe has no shared expert: drop --shared-experts (or use qwen2-moe)")
    return SynthLayout(
        config=qwen_moe_config(d, version),
        tensors=expand(list(qwen_moe_items(d, version)), lambda lin: "bf16"),
        default_shards=d.shards,
    )


OTHER_PRESETS = [
    PresetSpec(
        name="gpt-oss",
        summary="gpt-oss native MXFP4: 3-D experts gate_up_proj_blocks [E, 2I, H/32, 16] + "
        "_scales + _bias (interleaved gate/up), router and attention biases, sinks",
        family="gpt_oss",
        producer="openai",
        tiny=GPT_OSS_TINY,
        full=GPT_OSS_FULL,
        build=build_gpt_oss,
    ),
    PresetSpec(
        name="deepseek-v4",
        summary="DeepSeek-V4 native: FP4 experts (I8 + F8_E8M0 .scale), FP8 ue8m0 linears, "
        "hyper-connections, compressor/indexer, engram, mtp.0",
        family="deepseek_v4",
        producer="deepseek",
        tiny=DEEPSEEK_V4_TINY,
        full=DEEPSEEK_V4_FULL,
        build=build_deepseek_v4,
    ),
    PresetSpec(
        name="qwen3.5-moe-mxfp4",
        summary="Quark MXFP4 Qwen3.5-MoE: per-expert MXFP4, mlp.shared_expert + "
        "shared_expert_gate, BF16 gated-delta-net and full attention",
        family="qwen3_5_moe",
        producer="quark",
        tiny=QWEN3_5_MOE_TINY,
        full=QWEN3_5_MOE_FULL,
        build=build_qwen3_5_moe_mxfp4,
    ),
    PresetSpec(
        name="qwen2-moe",
        summary="Qwen2-MoE (Qwen1.5-MoE) in BF16: mlp.shared_expert + shared_expert_gate, "
        "q/k/v biases",
        family="qwen3_moe",
        producer="qwen",
        tiny=QWEN_MOE_TINY,
        full=QWEN2_MOE_FULL,
        build=lambda d, o: build_qwen_moe(d, o, version=2),
        quantized=False,
    ),
    PresetSpec(
        name="qwen3-moe",
        summary="Qwen3-MoE in BF16: q_norm/k_norm, no shared expert",
        family="qwen3_moe",
        producer="qwen",
        tiny=QWEN_MOE_TINY.model_copy(update={"n_shared": 0}),
        full=QWEN3_MOE_FULL,
        build=lambda d, o: build_qwen_moe(d, o, version=3),
        quantized=False,
    ),
]

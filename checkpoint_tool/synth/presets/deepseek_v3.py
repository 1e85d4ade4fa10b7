"""Presets on the DeepSeek-V3/R1 architecture: DeepSeek native FP8, Quark, ModelOpt.

Each builder decides, per linear, the producer's encoding, and writes the producer's config:

- ``deepseek-v3-fp8``: native block FP8 (``weight_scale_inv`` F32), BF16 router/norms/embeddings,
  F32 ``e_score_correction_bias``, MTP layer; shards named ``model-0000K-of-000NNN`` (six digits
  after ``of``, as deepseek-ai publishes them).
- ``deepseek-v3-bf16``: the same model in BF16 (no ``quantization_config``), as DeepSeek's
  ``fp8_cast_bf16.py`` writes it: the twin every engine runs, for numerics proven bit for bit.
- ``deepseek-v3-fp8-per-tensor``: same model, per-tensor FP8 (``quant_method: fp8`` without
  ``weight_block_size``): a layout FSE must refuse.
- ``quark-mxfp4`` / ``quark-mxfp4-ptpc-attn`` / ``quark-fp8-per-tensor`` / ``quark-nvfp4``: Quark's
  in-memory exports (no MTP layer, BF16 router bias, routers not listed in ``exclude``).
- ``quark-hybrid``: Quark's file-to-file export of a DeepSeek FP8 source (FORMATS.md 3 and 5).
- ``modelopt-nvfp4``: ModelOpt NVFP4 (``hf_quant_config.json``, ``input_scale``).
- ``moe-1024x80-mxfp4``: ``quark-mxfp4`` on a scale model of 1024 experts x 80 layers
  (``--sparse``: ~486k tensors, ~0.93 TB in 192 shards), for measuring how ckpt scales.
"""

from __future__ import annotations

from functools import partial

from checkpoint_tool.synth.dims import (
    DEEPSEEK_V3_FULL,
    DEEPSEEK_V3_TINY,
    MOE_1024X80_FULL,
    MOE_1024X80_TINY,
    Dims,
)
from checkpoint_tool.synth.expand import expand
from checkpoint_tool.synth.families.deepseek_v3 import deepseek_v3_config, deepseek_v3_items
from checkpoint_tool.synth.layout import Linear, SynthLayout
from checkpoint_tool.synth.presets.base import PresetOptions, PresetSpec
from checkpoint_tool.synth.quark import quark_config

#: deepseek-ai/DeepSeek-V3 and R1 config.json ``quantization_config``
DEEPSEEK_FP8_BLOCK_CONFIG = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}
#: the ModelOpt producer record of the NVFP4 producer fixture
MODELOPT_PRODUCER = {"name": "modelopt", "version": "0.35.1.dev0+gc359cb774.d20260115"}

_BF16_ROLES = ("router", "router_aux", "lm_head", "mtp_proj", "mtp_head")


def _items(d: Dims, opts: PresetOptions, *, mtp: bool, router_bias_dtype: str) -> list:
    return list(
        deepseek_v3_items(
            d, router_bias_dtype=router_bias_dtype, fused_routed=opts.fused_experts, mtp=mtp
        )
    )


def _linears(items: list) -> list[Linear]:
    return [it for it in items if isinstance(it, Linear)]


def build_deepseek_fp8(d: Dims, opts: PresetOptions, *, per_tensor: bool = False) -> SynthLayout:
    enc = "deepseek_fp8_tensor" if per_tensor else "deepseek_fp8_block"
    items = _items(d, opts, mtp=True, router_bias_dtype="F32")
    qcfg = dict(DEEPSEEK_FP8_BLOCK_CONFIG)
    if per_tensor:
        del qcfg["weight_block_size"]
    tensors = expand(items, lambda lin: "bf16" if lin.role in _BF16_ROLES else enc)
    return SynthLayout(
        config=deepseek_v3_config(d, qcfg),
        tensors=tensors,
        shard_digits_total=6,
        default_shards=d.shards,
    )


def build_deepseek_bf16(d: Dims, opts: PresetOptions) -> SynthLayout:
    items = _items(d, opts, mtp=True, router_bias_dtype="F32")
    return SynthLayout(
        config=deepseek_v3_config(d, None),
        tensors=expand(items, lambda lin: "bf16"),
        shard_digits_total=6,
        default_shards=d.shards,
    )


def _quark_in_memory(
    d: Dims,
    opts: PresetOptions,
    *,
    encoding: str,
    global_spec: str,
    attn: str | None,
) -> SynthLayout:
    """Quark export of an in-memory model; ``attn``: None (same as global), "bf16" (excluded by
    exact name) or "fp8_per_channel" (``*self_attn*`` layer_quant_config)."""
    items = _items(d, opts, mtp=False, router_bias_dtype="BF16")
    attn_enc = {None: encoding, "bf16": "bf16", "fp8_per_channel": "quark_fp8_channel"}[attn]

    def assign(lin: Linear) -> str:
        if lin.role in _BF16_ROLES:
            return "bf16"
        return attn_enc if lin.role == "attn" else encoding

    exclude = ["lm_head"]
    if attn == "bf16":
        exclude += [lin.module for lin in _linears(items) if lin.role == "attn"]
    layer_specs = {"*self_attn*": "fp8_per_channel"} if attn == "fp8_per_channel" else None
    qcfg = quark_config(global_spec=global_spec, exclude=exclude, layer_specs=layer_specs)
    return SynthLayout(
        config=deepseek_v3_config(d.model_copy(update={"mtp_layers": 0}), qcfg),
        tensors=expand(items, assign),
        default_shards=d.shards,
    )


def build_quark_hybrid(d: Dims, opts: PresetOptions) -> SynthLayout:
    """File-to-file hybrid of a DeepSeek FP8 source (FORMATS.md 3, 5).

    Kept FP8 attention: exact-name ``layer_quant_config`` entries (per_block [128,128]) with
    ``weight`` F8_E4M3 + ``weight_scale`` F32. MLPs and experts: MXFP4 from the global config.
    Routers, lm_head and the MTP BF16 projections: exact names in ``exclude``. Shared experts
    mixed per layer: the first MoE layer's are excluded (BF16, three names in ``exclude``), the
    second MoE layer's keep block FP8 (exact-name entries), the others match the routed experts.
    """
    items = _items(d, opts, mtp=True, router_bias_dtype="F32")
    moe_layers = sorted(
        {lin.layer for lin in _linears(items) if lin.role == "shared" and lin.layer is not None}
    )
    main_moe = [layer for layer in moe_layers if layer < d.num_layers]
    excluded_shared = main_moe[0] if main_moe else None
    fp8_shared = main_moe[1] if len(main_moe) > 1 else None

    def assign(lin: Linear) -> str:
        if lin.role in _BF16_ROLES:
            return "bf16"
        if lin.role == "attn":
            return "quark_fp8_block"
        if lin.role == "shared" and lin.layer == excluded_shared:
            return "bf16"
        if lin.role == "shared" and lin.layer == fp8_shared:
            return "quark_fp8_block"
        return "quark_mxfp4"

    exclude: list[str] = []
    layer_specs: dict[str, str] = {}
    for lin in _linears(items):
        enc = assign(lin)
        if enc == "bf16":
            exclude.append(lin.module)
        elif enc == "quark_fp8_block":
            layer_specs[lin.module] = "fp8_per_block"
    qcfg = quark_config(global_spec="mxfp4", exclude=exclude, layer_specs=layer_specs)
    return SynthLayout(
        config=deepseek_v3_config(d, qcfg),
        tensors=expand(items, assign),
        index_total_size="files",
        shard_digits_total=6,
        default_shards=d.shards,
    )


def build_modelopt_nvfp4(d: Dims, opts: PresetOptions) -> SynthLayout:
    """ModelOpt NVFP4: config in ``hf_quant_config.json``; activation scale ``input_scale``.

    ``kv_cache_quant_algo`` is null: ModelOpt's FP8 KV-cache scale tensors for MLA attention
    are not modelled.
    """
    items = _items(d, opts, mtp=False, router_bias_dtype="F32")
    hf_quant = {
        "producer": dict(MODELOPT_PRODUCER),
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": ["lm_head"],
        },
    }
    return SynthLayout(
        config=deepseek_v3_config(d.model_copy(update={"mtp_layers": 0}), None),
        tensors=expand(items, lambda lin: "bf16" if lin.role in _BF16_ROLES else "modelopt_nvfp4"),
        extra_files={"hf_quant_config.json": hf_quant},
        default_shards=d.shards,
    )


#: a DeepSeek-V3 preset: ``_spec(name, summary, producer=..., build=...)``
_spec = partial(PresetSpec, family="deepseek_v3", tiny=DEEPSEEK_V3_TINY, full=DEEPSEEK_V3_FULL)


#: Quark's in-memory exports, each also with fused experts: name, encoding, Quark global spec,
#: attention ("-": the global spec, "bf16": excluded by exact name, "fp8_per_channel": a
#: ``*self_attn*`` layer_quant_config), then the summary
_QUARK_IN_MEMORY = """
quark-mxfp4           quark_mxfp4      mxfp4          bf16            Quark MXFP4, per-expert routed + shared experts, BF16 attention excluded by name
quark-mxfp4-ptpc-attn quark_mxfp4      mxfp4          fp8_per_channel Quark MXFP4 with FP8 per-channel attention ('*self_attn*'), as Quark 0.13 exports
quark-fp8-per-tensor  quark_fp8_tensor fp8_per_tensor -               Quark FP8 per-tensor (BF16 weight_scale and static input_scale), as Quark 0.13 exports
quark-nvfp4           quark_nvfp4      nvfp4          -               Quark NVFP4 everywhere but lm_head (weight_scale_2, input_scale_2)
"""


def _quark_in_memory_presets() -> list[PresetSpec]:
    """One preset per ``_QUARK_IN_MEMORY`` row, built by ``_quark_in_memory``."""
    out = []
    for line in _QUARK_IN_MEMORY.strip().splitlines():
        name, encoding, global_spec, attn, summary = line.split(maxsplit=4)
        build = partial(
            _quark_in_memory,
            encoding=encoding,
            global_spec=global_spec,
            attn=None if attn == "-" else attn,
        )
        out.append(_spec(name, summary, producer="quark", build=build, supports_fused_experts=True))
    return out


DEEPSEEK_V3_PRESETS = [
    _spec(
        "deepseek-v3-fp8",
        "DeepSeek-V3/R1 native block FP8 (weight_scale_inv), dense first layers, MTP layer",
        producer="deepseek",
        build=build_deepseek_fp8,
    ),
    _spec(
        "deepseek-v3-bf16",
        "DeepSeek-V3 in BF16 (no quantization_config, as fp8_cast_bf16.py writes it), MTP layer",
        producer="deepseek",
        build=build_deepseek_bf16,
        quantized=False,
    ),
    _spec(
        "deepseek-v3-fp8-per-tensor",
        "DeepSeek-V3 with per-tensor FP8 (quant_method fp8, no weight_block_size)",
        producer="deepseek",
        build=partial(build_deepseek_fp8, per_tensor=True),
    ),
    *_quark_in_memory_presets(),
    _spec(
        "quark-hybrid",
        "Quark file2file hybrid: block-FP8 attention, MXFP4 experts, per-layer mixed shared",
        producer="quark",
        build=build_quark_hybrid,
    ),
    _spec(
        "moe-1024x80-mxfp4",
        "Quark MXFP4 as quark-mxfp4 on 1024 experts x 80 layers (--sparse: ~486k tensors)",
        producer="quark",
        build=partial(_quark_in_memory, encoding="quark_mxfp4", global_spec="mxfp4", attn="bf16"),
        tiny=MOE_1024X80_TINY,
        full=MOE_1024X80_FULL,
    ),
    _spec(
        "modelopt-nvfp4",
        "ModelOpt NVFP4 (hf_quant_config.json, input_scale), BF16 routers and lm_head",
        producer="modelopt",
        build=build_modelopt_nvfp4,
    ),
]

"""compressed-tensors configs -> schemes (vLLM's matching and the producer's), the INT4 storage
and codec against an independent numpy packer, NVFP4's dividing global scale.

The matching facts are vLLM 0.33's ``compressed_tensors/utils.py`` (``should_ignore_layer``,
``find_matched_target``), ``compressed_tensors.py`` (``from_config``, ``get_scheme_dict``) and
``compressed_tensors_moe.py`` (``get_moe_method``); the packing is compressed-tensors'
``pack_quantized/helpers.py`` ``pack_to_int32``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from checkpoint_tool.errors import AlignmentError
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.quant.codecs.int4 import pack_int4, unpack_int4
from checkpoint_tool.quant.configs import CompressedTensorsConfig
from checkpoint_tool.quant.configs.load import load_quant_config
from checkpoint_tool.quant.scheme import WeightFormat
from checkpoint_tool.quant.storage import get_storage_format
from checkpoint_tool.synth.presets.compressed_tensors import (
    KIMI_K2_THINKING_QUANT_CONFIG,
    QWEN3_FP8_DYNAMIC_QUANT_CONFIG,
    QWEN3_NVFP4_QUANT_CONFIG,
)

INT4_G32 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}
FP8_CH = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
TOKEN = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}


def ct(groups: dict, ignore=(), fmt="pack-quantized", dtype="bfloat16") -> CompressedTensorsConfig:
    qc = {"quant_method": "compressed-tensors", "format": fmt, "config_groups": groups}
    qc["ignore"] = list(ignore)
    cfg = load_quant_config({"torch_dtype": dtype, "quantization_config": qc})
    assert isinstance(cfg, CompressedTensorsConfig)
    return cfg


def kimi() -> CompressedTensorsConfig:
    cfg = load_quant_config(
        {"torch_dtype": "bfloat16", "quantization_config": KIMI_K2_THINKING_QUANT_CONFIG}
    )
    assert isinstance(cfg, CompressedTensorsConfig)
    return cfg


# -- configs ---------------------------------------------------------------------------------


def test_kimi_routed_int4_everything_else_ignored() -> None:
    cfg = kimi()
    routed = cfg.scheme_for("model.layers.3.mlp.experts.200.down_proj")
    assert routed.format is WeightFormat.INT4 and routed.group_size == 32
    assert routed.weight_suffix == "weight_packed" and routed.weight_dtypes == ("I32",)
    assert routed.scale_dtypes[0] == "BF16" and routed.zero_point_suffix is None
    # vLLM matches the FusedMoE layer through the RoutedExperts copy of the Linear entry
    assert "RoutedExperts" in routed.rule
    for module in (
        "model.layers.3.mlp.shared_experts.gate_proj",
        "model.layers.0.mlp.down_proj",
        "model.layers.3.self_attn.q_a_proj",
        "model.layers.3.self_attn.kv_b_proj",
        "lm_head",
    ):
        assert not cfg.scheme_for(module).quantized, module
        assert not cfg.producer_scheme_for(module).quantized, module
    assert (
        cfg.producer_scheme_for("model.layers.3.mlp.experts.5.gate_proj").format
        is WeightFormat.INT4
    )


def test_fp8_nvfp4_block_and_scale_dtypes() -> None:
    fp8 = load_quant_config(
        {"torch_dtype": "bfloat16", "quantization_config": QWEN3_FP8_DYNAMIC_QUANT_CONFIG}
    )
    s = fp8.scheme_for("model.layers.0.mlp.experts.1.up_proj")
    assert s.format is WeightFormat.FP8_PER_CHANNEL and s.weight_suffix == "weight"
    assert (
        s.scale_dtypes[0] == "BF16" and s.input_scale_suffix is None and s.activation == "dynamic"
    )
    assert not fp8.scheme_for("model.layers.0.mlp.gate").quantized  # router: re:.*mlp.gate$
    block = ct(
        {
            "g": {
                "targets": ["Linear"],
                "weights": {**FP8_CH, "strategy": "block", "block_structure": [128, 128]},
                "input_activations": TOKEN,
            }
        },
        fmt="float-quantized",
        dtype="float16",
    ).scheme_for("model.layers.0.self_attn.o_proj")
    assert block.format is WeightFormat.FP8_BLOCK and block.block == (128, 128)
    assert block.scale_dtypes[0] == "F16"
    static = ct(
        {
            "g": {
                "targets": ["Linear"],
                "weights": {**FP8_CH, "strategy": "tensor"},
                "input_activations": {**TOKEN, "strategy": "tensor", "dynamic": False},
            }
        },
        fmt="float-quantized",
    ).scheme_for("model.layers.0.mlp.experts.0.down_proj")
    assert (
        static.format is WeightFormat.FP8_PER_TENSOR and static.input_scale_suffix == "input_scale"
    )
    nv = load_quant_config(
        {"torch_dtype": "bfloat16", "quantization_config": QWEN3_NVFP4_QUANT_CONFIG}
    )
    s = nv.scheme_for("model.layers.0.mlp.experts.1.up_proj")
    assert s.format is WeightFormat.NVFP4 and s.global_scale_divides
    assert (s.weight_suffix, s.global_scale_suffix, s.input_scale_suffix) == (
        "weight_packed",
        "weight_global_scale",
        "input_global_scale",
    )
    a16 = dict(
        QWEN3_NVFP4_QUANT_CONFIG,
        config_groups={
            "g": {**QWEN3_NVFP4_QUANT_CONFIG["config_groups"]["group_0"], "input_activations": None}
        },
    )
    s16 = load_quant_config({"quantization_config": a16}).scheme_for(
        "model.layers.0.mlp.experts.1.up_proj"
    )
    assert s16.input_scale_suffix is None and s16.activation is None


def test_vllm_matching_rules() -> None:
    # re: is re.match: anchored at the start, not at the end
    cfg = ct({"g": {"targets": ["re:model.layers.0.mlp"], "weights": INT4_G32}})
    assert cfg.scheme_for("model.layers.0.mlp.experts.0.gate_proj").quantized
    assert (
        not ct({"g": {"targets": ["re:mlp"], "weights": INT4_G32}})
        .scheme_for("model.layers.0.mlp.experts.0.gate_proj")
        .quantized
    )
    # the three projections of a FusedMoE layer must agree (expert 0 decides for all)
    split = ct({"g": {"targets": ["re:.*experts.*(gate|up)_proj$"], "weights": INT4_G32}})
    refused = split.scheme_for("model.layers.1.mlp.experts.7.down_proj")
    assert refused.format is WeightFormat.UNSUPPORTED
    assert "All MoE projections need to have same quantization scheme" in refused.rule
    # the producer quantized gate/up and left down alone: the files hold what it wrote
    assert split.producer_scheme_for("model.layers.1.mlp.experts.7.gate_proj").quantized
    assert not split.producer_scheme_for("model.layers.1.mlp.experts.7.down_proj").quantized
    # a fused layer whose shards are ignored differently raises in vLLM
    mixed = ct({"g": {"targets": ["Linear"], "weights": INT4_G32}}, ignore=["re:.*gate_proj$"])
    bad = mixed.scheme_for("model.layers.0.mlp.up_proj")
    assert (
        bad.format is WeightFormat.UNSUPPORTED
        and "Found different quantization schemes" in bad.rule
    )
    # a group whose only target ends with Attention is dropped (vLLM from_config)
    attn = ct({"a": {"targets": ["DeepseekV3Attention"], "weights": INT4_G32}})
    assert not attn.scheme_for("model.layers.0.self_attn.o_proj").quantized
    # a class target matches vLLM's class names by substring, not the producer's exactly
    row = ct({"g": {"targets": ["RowParallelLinear"], "weights": INT4_G32}})
    assert row.scheme_for("model.layers.0.mlp.down_proj").quantized
    assert not row.scheme_for("model.layers.0.mlp.gate_proj").quantized
    assert not row.producer_scheme_for("model.layers.0.mlp.down_proj").quantized


def test_what_ckpt_cannot_decode_is_unsupported_with_the_reason() -> None:
    int8 = ct({"g": {"targets": ["Linear"], "weights": {**INT4_G32, "num_bits": 8}}})
    s = int8.scheme_for("model.layers.0.mlp.experts.0.gate_proj")
    assert s.format is WeightFormat.UNSUPPORTED and "int4 group only" in s.rule
    w8a8 = ct(
        {
            "g": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
                "input_activations": {**TOKEN, "type": "int"},
            }
        },
        fmt="int-quantized",
    )
    assert (
        w8a8.scheme_for("model.layers.0.mlp.experts.0.gate_proj").format is WeightFormat.UNSUPPORTED
    )
    asym = ct({"g": {"targets": ["Linear"], "weights": {**INT4_G32, "symmetric": False}}})
    a = asym.scheme_for("model.layers.0.mlp.experts.0.gate_proj")
    assert a.format is WeightFormat.INT4 and a.zero_point_suffix == "weight_zero_point"


# -- INT4 storage and codec ------------------------------------------------------------------


def numpy_pack(q: np.ndarray, axis: int = -1) -> np.ndarray:
    """compressed-tensors ``pack_to_int32``: ``q + 8``, value j of a word in bits 4j..4j+3."""
    u = np.moveaxis(q.astype(np.int64) + 8, axis, -1)
    u = u.reshape(*u.shape[:-1], -1, 8)
    words = sum((u[..., j] << (4 * j)) for j in range(8)).astype(np.uint32).view(np.int32)
    return np.moveaxis(words, -1, axis)


def test_int4_pack_matches_numpy_and_roundtrips() -> None:
    gen = np.random.default_rng(7)
    q = gen.integers(-8, 8, size=(6, 64))
    words = numpy_pack(q)
    assert np.array_equal(pack_int4(torch.from_numpy(q + 8)).numpy(), words)
    assert np.array_equal(unpack_int4(torch.from_numpy(words)).numpy(), q + 8)
    zp = gen.integers(-8, 8, size=(16, 2))
    assert np.array_equal(pack_int4(torch.from_numpy(zp + 8), dim=-2).numpy(), numpy_pack(zp, 0))


def test_int4_codec_dequantizes_as_compressed_tensors_defines() -> None:
    gen = np.random.default_rng(8)
    codec = codec_for_format("int4", group_size=32, scale_dtype="F32")
    q = gen.integers(-8, 8, size=(4, 64))
    s = gen.uniform(0.01, 0.1, size=(4, 2)).astype(np.float32)
    parts = {"weight": torch.from_numpy(numpy_pack(q)), "scale": torch.from_numpy(s)}
    want = q * np.repeat(s, 32, axis=1)
    assert np.allclose(codec.dequantize(parts).numpy(), want, rtol=0, atol=1e-7)
    # asymmetric: (q - z) * s with z packed along the output dim
    acodec = codec_for_format("int4", group_size=32, scale_dtype="F32", symmetric=False)
    z = gen.integers(-8, 8, size=(8, 2))
    q8 = gen.integers(-8, 8, size=(8, 64))
    s8 = gen.uniform(0.01, 0.1, size=(8, 2)).astype(np.float32)
    parts = {
        "weight": torch.from_numpy(numpy_pack(q8)),
        "scale": torch.from_numpy(s8),
        "zero_point": torch.from_numpy(numpy_pack(z, 0)),
    }
    want = (q8 - np.repeat(z, 32, axis=1)) * np.repeat(s8, 32, axis=1)
    assert np.allclose(acodec.dequantize(parts).numpy(), want, rtol=0, atol=1e-7)
    # quantize -> dequantize stays within half a step of each group
    w = torch.randn(8, 64)
    for c in (codec, acodec):
        back = c.dequantize(c.quantize(w))
        step = (w.reshape(8, 2, 32).amax(-1) - w.reshape(8, 2, 32).amin(-1)) / 15
        assert ((back - w).abs().reshape(8, 2, 32).amax(-1) <= step * 1.01 + 1e-6).all()


def test_int4_slices_and_pads_keep_words_and_groups() -> None:
    sym = get_storage_format(kimi().scheme_for("model.layers.1.mlp.experts.0.down_proj"))
    assert sym.alignment(-1, (7168, 2048)) == 32 and sym.alignment(-2, (7168, 2048)) == 1
    assert sym.storage_shapes((7168, 2048)) == {"weight": (7168, 256), "scale": (7168, 64)}
    regions = sym.storage_regions((7168, 2048), -1, 1024, 2048)
    assert (regions["weight"].start, regions["scale"].start) == (128, 32)
    with pytest.raises(AlignmentError):
        sym.storage_regions((7168, 2048), -1, 16, 2048)
    pads = sym.storage_pads((7168, 1024), -1, 64)
    assert pads["weight"].fill == "88888888" and pads["weight"].amount == 8
    # a padded word decodes to zero (symmetric: 8 - 8), whatever the padded scale
    codec = codec_for_format("int4", group_size=32, scale_dtype="BF16")
    parts = codec.pad(codec.quantize(torch.randn(4, 64)), -1, 32)
    assert codec.dequantize(parts)[:, 64:].abs().max() == 0
    asym = codec_for_format("int4", group_size=32, scale_dtype="BF16", symmetric=False)
    assert asym.alignment(-2, (64, 64)) == 8  # zero points packed eight rows a word
    parts = asym.pad(asym.quantize(torch.randn(8, 64) + 1), -2, 8)
    assert asym.dequantize(parts)[8:].abs().max() == 0


def test_nvfp4_global_scale_divides() -> None:
    mo = codec_for_format("nvfp4")
    cti = codec_for_format("nvfp4", global_scale_divides=True)
    w = torch.randn(4, 32)
    parts = cti.quantize(w)
    assert tuple(parts["global_scale"].shape) == (1,)
    modelopt = {**parts, "global_scale": (1 / parts["global_scale"]).reshape(())}
    assert torch.equal(cti.dequantize(parts), mo.dequantize(modelopt))

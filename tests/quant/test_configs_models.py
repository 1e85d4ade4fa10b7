"""Config models: every producer's key set parses, unknown keys are kept, bad configs refused."""

from __future__ import annotations

import copy

import pytest
from catalog.producer_ckpt import QUARK_STEMS, fixture_json, producer_fixture

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    NoQuantConfig,
    QuarkConfig,
)
from checkpoint_tool.quant.resolve import load_quant_config, split_tensor_name
from checkpoint_tool.quant.scheme import WeightFormat as F

QUARK_08_MXFP4 = {  # Quark 0.8 wrote fewer keys per tensor config and no layer_type config
    "quant_method": "quark",
    "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized"},
    "exclude": ["lm_head"],
    "global_quant_config": {
        "weight": {
            "dtype": "fp4",
            "qscheme": "per_group",
            "ch_axis": -1,
            "group_size": 32,
            "is_dynamic": False,
            "symmetric": None,
            "round_method": "half_even",
            "scale_type": "float",
            "observer_cls": "PerBlockMXObserver",
            "scale_format": "e8m0",
        },
        "input_tensors": None,
        "output_tensors": None,
        "bias": None,
    },
    "layer_quant_config": {},
    "quant_mode": "eager_mode",
}


def test_split_tensor_name():
    assert split_tensor_name("model.layers.3.mlp.experts.0.gate_proj.weight_scale_inv") == (
        "model.layers.3.mlp.experts.0.gate_proj",
        "weight_scale_inv",
    )
    assert split_tensor_name("lm_head.weight") == ("lm_head", "weight")
    assert split_tensor_name("bias") == ("", "bias")


@pytest.mark.parametrize("stem", QUARK_STEMS)
def test_quark_013_configs_parse_and_keep_unknown_keys(stem):
    qc, _ = producer_fixture(stem)
    cfg = load_quant_config({"quantization_config": qc})
    assert isinstance(cfg, QuarkConfig) and cfg.version == "0.13"
    assert cfg.model_extra["kv_cache_post_rope"] is False  # unknown top-level key kept
    w = cfg.global_quant_config.weight
    first = w[0] if isinstance(w, list) else w
    assert first.model_extra["max_input_numel"] == 4194304  # unknown tensor-config key kept


def test_quark_08_key_set_and_weight_only():
    cfg = load_quant_config(QUARK_08_MXFP4)
    s = cfg.scheme_for("model.layers.0.mlp.down_proj")
    assert (s.format, s.group_size, s.activation) == (F.MXFP4, 32, None)


def test_a_slot_holds_at_most_two_tensor_configs():
    qc, _ = producer_fixture("nvfp4")
    bad = copy.deepcopy(qc)
    bad["global_quant_config"]["weight"].append(bad["global_quant_config"]["weight"][0])
    with pytest.raises(InputError, match=r"global_quant_config\.weight"):
        load_quant_config({"quantization_config": bad})


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        (
            {
                "dtype": "fp8_e4m3",
                "qscheme": "per_block",
                "block_size": [128, 128],
                "scale_type": "float32",
            },
            (F.FP8_BLOCK, (128, 128), ("F32",)),
        ),
        (
            {
                "dtype": "fp8_e4m3",
                "qscheme": "per_block",
                "block_size": [128, 128],
                "scale_type": "float8_e8m0fnu",
            },
            (F.FP8_BLOCK, (128, 128), ("U8", "F8_E8M0")),
        ),
        (
            {"dtype": "fp8_e4m3", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"},
            (F.MXFP8, None, ("U8",)),
        ),
        ({"dtype": "int4", "qscheme": "per_group", "group_size": 128}, (F.UNSUPPORTED, None, ())),
        (
            {"dtype": "fp6_e2m3", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"},
            (F.UNSUPPORTED, None, ()),
        ),
    ],
    ids=["fp8-block-f32", "fp8-block-e8m0", "mxfp8", "int4", "mxfp6"],
)
def test_quark_weight_specs_map_to_schemes(weight, expected):
    cfg = QuarkConfig.model_validate({"global_quant_config": {"weight": weight}})
    s = cfg.scheme_for("model.layers.0.mlp.up_proj")
    assert (s.format, s.block, s.scale_dtypes if s.format is not F.UNSUPPORTED else ()) == expected


def test_quark_w4a8_two_part_weight_is_reported_unsupported():
    w = [
        {"dtype": "fp8_e4m3", "qscheme": "per_tensor"},
        {"dtype": "int4", "qscheme": "per_channel", "ch_axis": 0},
    ]
    s = QuarkConfig.model_validate({"global_quant_config": {"weight": w}}).scheme_for("x.o_proj")
    assert s.format is F.UNSUPPORTED and "W4A8" in s.rule


def test_deepseek_fp8_configs():
    r1 = load_quant_config(
        {"quantization_config": fixture_json("deepseek-ai_DeepSeek-V3_R1.quantization_config.json")}
    )
    assert isinstance(r1, DeepSeekFp8Config)
    s = r1.scheme_for("model.layers.5.self_attn.o_proj")
    assert (s.format, s.block, s.scale_suffix, s.scale_is_e8m0) == (
        F.FP8_BLOCK,
        (128, 128),
        "weight_scale_inv",
        False,
    )
    v31 = load_quant_config(
        {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "scale_fmt": "ue8m0",
            "activation_scheme": "dynamic",
            "modules_to_not_convert": ["model.layers.0.mlp.down_proj"],
        }
    )
    s = v31.scheme_for("model.layers.5.self_attn.o_proj")
    assert s.scale_is_e8m0 and "F32" in s.scale_dtypes
    assert not v31.scheme_for("model.layers.0.mlp.down_proj").quantized
    per_tensor = load_quant_config({"quant_method": "fp8", "activation_scheme": "static"})
    s = per_tensor.scheme_for("model.layers.0.mlp.down_proj")
    assert (s.format, s.scale_suffix, s.input_scale_suffix) == (
        F.FP8_PER_TENSOR,
        "weight_scale",
        "input_scale",
    )


def test_modelopt_file_and_inline_spellings_agree():
    hfq = fixture_json(
        "modelopt_hf_quant_config.vipertsniper_DeepSeek-R1-Distill-Qwen-32B-NVFP4.json"
    )
    a = load_quant_config({"model_type": "qwen2"}, hfq)
    b = load_quant_config(
        {
            "quantization_config": {
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "group_size": 16,
                "ignore": ["lm_head"],
                "kv_cache_quant_algo": "FP8",
            }
        }
    )
    assert isinstance(a, ModelOptConfig) and isinstance(b, ModelOptConfig)
    assert (a.quant_algo, a.group_size, a.exclude_modules) == (
        b.quant_algo,
        b.group_size,
        b.exclude_modules,
    )
    assert a.producer["name"] == "modelopt"
    s = a.scheme_for("model.layers.0.mlp.down_proj")
    assert (s.format, s.global_scale_suffix, s.input_scale_suffix) == (
        F.NVFP4,
        "weight_scale_2",
        "input_scale",
    )
    with pytest.raises(InputError, match="MIXED_PRECISION"):
        load_quant_config({}, {"quantization": {"quant_algo": "MIXED_PRECISION"}})


def test_deepseek_v4_expert_dtypes():
    qc = {"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}
    fp4 = load_quant_config(
        {"model_type": "deepseek_v4", "expert_dtype": "fp4", "quantization_config": qc}
    )
    fp8 = load_quant_config(
        {"model_type": "deepseek_v4", "expert_dtype": "fp8", "quantization_config": qc}
    )
    assert isinstance(fp4, DeepSeekV4Config) and isinstance(fp8, DeepSeekV4Config)
    e4, e8 = (
        fp4.scheme_for("layers.3.ffn.experts.7.w2"),
        fp8.scheme_for("layers.3.ffn.experts.7.w2"),
    )
    assert (e4.format, e4.scale_suffix, e4.scale_dtypes[0]) == (F.MXFP4, "scale", "F8_E8M0")
    assert (e8.format, e8.scale_dtypes) == (F.FP8_BLOCK, ("F32",))
    assert fp4.scheme_for("layers.3.attn.wq_a").scale_dtypes[0] == "F8_E8M0"
    assert fp8.scheme_for("layers.3.attn.wq_a").scale_dtypes == ("F32",)
    with pytest.raises(InputError, match="expert_dtype"):
        load_quant_config(
            {"model_type": "deepseek_v4", "expert_dtype": "int4", "quantization_config": qc}
        )


def test_no_quantization_config():
    cfg = load_quant_config({"model_type": "llama"})
    assert isinstance(cfg, NoQuantConfig)
    assert not cfg.scheme_for("model.layers.0.mlp.down_proj").quantized
    assert isinstance(load_quant_config(None), NoQuantConfig)

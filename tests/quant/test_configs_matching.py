"""vLLM's name matching vs the producers' (FORMATS.md §3), and where they differ."""

from __future__ import annotations

from checkpoint_tool.quant.configs import DeepSeekFp8Config, ModelOptConfig, QuarkConfig
from checkpoint_tool.quant.resolve import scheme_differences
from checkpoint_tool.quant.scheme import WeightFormat as F

MX = {"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}}
FP8_CH = {"weight": {"dtype": "fp8_e4m3", "qscheme": "per_channel", "ch_axis": 0}}
FP8_BLOCK = {
    "weight": {
        "dtype": "fp8_e4m3",
        "qscheme": "per_block",
        "block_size": [128, 128],
        "scale_type": "float32",
    }
}


def quark(**kw) -> QuarkConfig:
    return QuarkConfig.model_validate({"quant_method": "quark", "global_quant_config": MX, **kw})


def fmt(cfg, module, producer=False):
    return (cfg.producer_scheme_for(module) if producer else cfg.scheme_for(module)).format


def test_exclude_exact_and_regex_honoured_by_both():
    cfg = quark(exclude=["lm_head", r"re:model\.layers\.\d+\.self_attn\..*"])
    for producer in (False, True):
        assert fmt(cfg, "lm_head", producer) is F.UNQUANTIZED
        assert fmt(cfg, "model.layers.7.self_attn.o_proj", producer) is F.UNQUANTIZED
        assert fmt(cfg, "model.layers.7.mlp.down_proj", producer) is F.MXFP4
    assert "re.match" in cfg.scheme_for("model.layers.7.self_attn.o_proj").rule


def test_exclude_glob_is_quark_only():
    cfg = quark(exclude=["*.mlp.shared_experts.*"])
    m = "model.layers.3.mlp.shared_experts.down_proj"
    assert fmt(cfg, m, producer=True) is F.UNQUANTIZED
    assert fmt(cfg, m) is F.MXFP4
    diffs = scheme_differences(cfg, [m, "model.layers.3.mlp.down_proj"])
    assert [d.module for d in diffs] == [m]
    assert "fnmatch" in diffs[0].producer.rule and "global" in diffs[0].vllm.rule


def test_vllm_matches_a_layer_name_that_is_a_substring_of_the_key():
    # DeepSeek-V4-style names without "model.": Quark's exact match fails, vLLM's substring hits
    cfg = quark(layer_quant_config={"model.layers.1.attn.wq_a": FP8_CH})
    m = "layers.1.attn.wq_a"
    assert fmt(cfg, m) is F.FP8_PER_CHANNEL
    assert "substring" in cfg.scheme_for(m).rule
    assert fmt(cfg, m, producer=True) is F.MXFP4
    assert fmt(cfg, "model.layers.1.attn.wq_a", producer=True) is F.FP8_PER_CHANNEL


def test_quark_prefers_exact_key_vllm_takes_first_match_in_order():
    cfg = quark(
        layer_quant_config={"*self_attn*": FP8_CH, "model.layers.0.self_attn.o_proj": FP8_BLOCK}
    )
    m = "model.layers.0.self_attn.o_proj"
    assert fmt(cfg, m, producer=True) is F.FP8_BLOCK
    assert fmt(cfg, m) is F.FP8_PER_CHANNEL
    assert fmt(cfg, "model.layers.1.self_attn.o_proj") is F.FP8_PER_CHANNEL
    assert [d.module for d in scheme_differences(cfg, [m, "model.layers.1.self_attn.o_proj"])] == [
        m
    ]


def test_layer_type_config_is_ignored_by_vllm():
    cfg = quark(layer_type_quant_config={"Linear": FP8_CH})
    assert fmt(cfg, "model.layers.0.mlp.down_proj", producer=True) is F.FP8_PER_CHANNEL
    assert fmt(cfg, "model.layers.0.mlp.down_proj") is F.MXFP4


def test_vllm_resolves_routed_experts_on_the_fused_moe_layer():
    # an exact per-expert key: Quark applies it to one expert, vLLM to the whole FusedMoE layer
    cfg = quark(layer_quant_config={"model.layers.1.mlp.experts.0.down_proj": FP8_BLOCK})
    e0, e5 = "model.layers.1.mlp.experts.0.down_proj", "model.layers.1.mlp.experts.5.gate_proj"
    assert fmt(cfg, e0, producer=True) is F.FP8_BLOCK and fmt(cfg, e5, producer=True) is F.MXFP4
    assert fmt(cfg, e0) is F.FP8_BLOCK and fmt(cfg, e5) is F.FP8_BLOCK
    assert "FusedMoE layer 'model.layers.1.mlp.experts'" in cfg.scheme_for(e5).rule
    # an exclude entry naming a child excludes the whole FusedMoE layer in vLLM
    # (should_ignore_layer(check_children=True), quark/utils.py; MoE is all-or-nothing)
    ex = quark(exclude=["model.layers.1.mlp.experts.0.down_proj"])
    assert fmt(ex, e0, producer=True) is F.UNQUANTIZED and fmt(ex, e0) is F.UNQUANTIZED
    assert fmt(ex, e5, producer=True) is F.MXFP4 and fmt(ex, e5) is F.UNQUANTIZED
    assert "names a child" in ex.scheme_for(e5).rule
    assert [d.module for d in scheme_differences(ex, [e0, e5])] == [e5]


def test_fused_moe_layer_is_matched_by_its_own_name_only():
    # no per-expert probing (QuarkMoEMethod.get_moe_method_target matches X.experts): a glob
    # for per-expert names does not match the FusedMoE layer, which takes the global spec
    cfg = quark(layer_quant_config={"*.experts.*.down_proj": FP8_BLOCK})
    gate = "model.layers.2.mlp.experts.3.gate_proj"
    assert fmt(cfg, gate) is F.MXFP4 and "global_quant_config" in cfg.scheme_for(gate).rule
    assert fmt(cfg, "model.layers.2.mlp.experts.3.down_proj", producer=True) is F.FP8_BLOCK


def test_deepseek_fp8_ignored_layers():
    cfg = DeepSeekFp8Config.model_validate(
        {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "ignored_layers": ["model.layers.0.self_attn.kv_b_proj", "model.layers.3.mlp.experts"],
        }
    )
    assert fmt(cfg, "model.layers.0.self_attn.kv_b_proj") is F.UNQUANTIZED
    assert fmt(cfg, "model.layers.1.self_attn.kv_b_proj") is F.FP8_BLOCK
    assert fmt(cfg, "model.layers.3.mlp.experts.9.up_proj") is F.UNQUANTIZED  # FusedMoE substring
    assert fmt(cfg, "model.layers.3.mlp.experts.9.up_proj", producer=True) is F.FP8_BLOCK


def test_modelopt_vllm_substring_exclusion():
    cfg = ModelOptConfig.model_validate(
        {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head", "self_attn"]}
    )
    m = "model.layers.4.self_attn.o_proj"
    assert fmt(cfg, m) is F.UNQUANTIZED and "substring" in cfg.scheme_for(m).rule
    assert (
        fmt(cfg, m, producer=True) is F.NVFP4
    )  # ModelOpt's wildcard "self_attn" matches no module
    glob = ModelOptConfig.model_validate(
        {"quant_algo": "NVFP4", "exclude_modules": ["model.layers.4.*"]}
    )
    assert fmt(glob, m) is F.UNQUANTIZED and fmt(glob, m, producer=True) is F.UNQUANTIZED

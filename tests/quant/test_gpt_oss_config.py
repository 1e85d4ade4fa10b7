"""gpt-oss's ``quant_method: mxfp4``: the config vLLM picks, the names, the 4-D blocks."""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog.safetensors_format import gpt_oss_header_shape, gpt_oss_storage_shape
from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.configs import GptOssMxfp4Config
from checkpoint_tool.quant.configs.load import load_quant_config
from checkpoint_tool.quant.configs.names import split_gpt_oss_name, split_tensor_name, tensor_name
from checkpoint_tool.quant.scheme import WeightFormat

QC = {
    "modules_to_not_convert": [
        "model.layers.*.self_attn",
        "model.layers.*.mlp.router",
        "model.embed_tokens",
        "lm_head",
    ],
    "quant_method": "mxfp4",
}


def test_mxfp4_is_gpt_oss_only_on_model_type_gpt_oss():
    cfg = load_quant_config({"model_type": "gpt_oss", "quantization_config": QC})
    assert isinstance(cfg, GptOssMxfp4Config)
    with pytest.raises(InputError, match="'mxfp4' is not supported"):
        load_quant_config({"model_type": "qwen3_moe", "quantization_config": QC})


def test_vllm_quantizes_the_experts_and_no_linear():
    cfg = GptOssMxfp4Config.model_validate(QC)
    experts = cfg.scheme_for("model.layers.3.mlp.experts.gate_up_proj")
    assert experts.format is WeightFormat.MXFP4 and experts.group_size == 32
    assert experts.scale_suffix == "scales" and experts.scale_dtypes == ("U8",)
    assert experts.activation is None  # weight-only
    for module in ("model.layers.3.self_attn.q_proj", "model.layers.3.mlp.router", "lm_head"):
        assert not cfg.scheme_for(module).quantized, module
    # the producer's own list: modules_to_not_convert globs
    producer = cfg.producer_scheme_for("model.layers.3.self_attn.q_proj")
    assert not producer.quantized and "modules_to_not_convert" in producer.rule


@pytest.mark.parametrize(
    ("name", "module", "suffix", "role"),
    [
        ("model.layers.0.mlp.experts.gate_up_proj_blocks", "gate_up_proj", "blocks", "weight"),
        ("model.layers.0.mlp.experts.gate_up_proj_scales", "gate_up_proj", "scales", "scale"),
        ("model.layers.0.mlp.experts.down_proj_bias", "down_proj", "bias", "bias"),
    ],
)
def test_names_split_at_the_underscore_and_join_back(name, module, suffix, role):
    full = f"model.layers.0.mlp.experts.{module}"
    assert split_tensor_name(name) == (full, suffix)
    assert split_gpt_oss_name(name) == (full, role)
    assert tensor_name(full, suffix) == name


def test_other_names_split_as_before():
    assert split_tensor_name("model.layers.0.mlp.experts.0.down_proj.weight_scale") == (
        "model.layers.0.mlp.experts.0.down_proj",
        "weight_scale",
    )
    assert split_tensor_name("model.layers.0.mlp.experts.gate_up_proj") == (
        "model.layers.0.mlp.experts",
        "gate_up_proj",
    )
    assert split_gpt_oss_name("model.layers.0.self_attn.o_proj.bias") is None
    assert (
        tensor_name("model.layers.0.self_attn.o_proj", "bias")
        == "model.layers.0.self_attn.o_proj.bias"
    )


def test_blocks_fold_to_packed_mxfp4_and_back():
    name = "model.layers.0.mlp.experts.down_proj_blocks"
    assert gpt_oss_storage_shape(name, [32, 2880, 90, 16]) == [32, 2880, 1440]
    assert gpt_oss_header_shape(name, "U8", [32, 2880, 1440]) == [32, 2880, 90, 16]
    # anything else is left alone
    assert gpt_oss_storage_shape("x.weight", [2, 3, 4, 16]) == [2, 3, 4, 16]
    assert gpt_oss_header_shape("x.weight", "U8", [2, 3, 64]) == [2, 3, 64]

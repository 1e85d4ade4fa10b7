"""vLLM's FSE gates, mirrored: verdicts and reason strings (quoted from vLLM 0.33)."""

from __future__ import annotations

import copy

from checkpoint_tool.model import model_facts
from checkpoint_tool.policy.fse_gates import vllm_fse_gate
from checkpoint_tool.quant.configs import (
    ModelOptConfig,
    NoQuantConfig,
)
from checkpoint_tool.quant.resolve import load_quant_config

from .helpers import MXFP4_SPEC, dsv3, fp8_block_spec, quark


def _gate(cfg: dict, model_cfg: dict, layer: int):
    facts = model_facts(model_cfg)
    qconfig = load_quant_config({**model_cfg, "quantization_config": cfg})
    return vllm_fse_gate(qconfig, cfg, facts, facts.layer(layer))


def test_no_quant_config_is_compatible():
    facts = model_facts(dsv3())
    for q in (None, NoQuantConfig()):
        assert vllm_fse_gate(q, None, facts, facts.layer(1)).compatible


def test_quark_same_global_spec_is_compatible():
    r = _gate(quark(), dsv3(), 2)
    assert r.compatible and r.text is None


def test_quark_excluded_shared_expert_reason_is_vllms():
    shared = [
        f"model.layers.2.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")
    ]
    r = _gate(quark(exclude=["lm_head", *shared]), dsv3(), 2)
    assert not r.compatible
    assert r.text == "Quark excludes shared experts at model.layers.2.mlp.shared_experts"
    # scoped to the layer: layer 3 still fuses (vLLM test: GLM-5.2 MTP layer excluded)
    assert _gate(quark(exclude=["lm_head", *shared]), dsv3(), 3).compatible


def test_quark_exclude_regex_and_qwen_gate_names():
    qwen = {
        "model_type": "qwen3_5_moe",
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_experts": 4,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
    }
    # a sibling gate (shared_expert_gate) and the router are not shared projections
    gates = ["model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate"]
    assert _gate(quark(exclude=gates), qwen, 0).compatible
    r = _gate(quark(exclude=[r"re:.*\.shared_expert\..*"]), qwen, 0)
    assert r.text == "Quark excludes shared experts at model.layers.0.mlp.shared_expert"


def test_quark_different_spec_for_one_shared_shard():
    lqc = {"model.layers.1.mlp.shared_experts.up_proj": fp8_block_spec()}
    r = _gate(quark(layer_quant_config=lqc), dsv3(), 1)
    assert not r.compatible
    assert r.text == (
        "Quark uses different quantization configurations for routed and shared experts at "
        "model.layers.1.mlp.shared_experts"
    )
    assert r.code == "quark_different_configs"
    # an identical spec under an exact key is still "the same configuration"
    same = {"model.layers.1.mlp.shared_experts.up_proj": copy.deepcopy(MXFP4_SPEC)}
    assert _gate(quark(layer_quant_config=same), dsv3(), 1).compatible


def test_fp8_per_tensor_refused_block_accepted():
    per_tensor = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
    r = _gate(per_tensor, dsv3(), 1)
    assert r.text == "FP8 shared-expert FSE is only implemented for block-quantized checkpoints"
    block = {**per_tensor, "weight_block_size": [128, 128]}
    assert _gate(block, dsv3(), 1).compatible


def test_fp8_ignores_shared_but_not_routed():
    cfg = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        "ignored_layers": ["model.layers.3.mlp.shared_experts.down_proj"],
    }
    r = _gate(cfg, dsv3(), 3)
    assert (
        r.text
        == "FP8 ignores routed and shared experts inconsistently at model.layers.3.mlp.shared_experts"
    )
    assert _gate(cfg, dsv3(), 2).compatible


def test_modelopt_is_not_implemented():
    facts = model_facts(dsv3())
    q = ModelOptConfig.model_validate({"quant_algo": "NVFP4", "group_size": 16})
    r = vllm_fse_gate(q, None, facts, facts.layer(1))
    assert r.text == (
        "shared-expert FSE quantization compatibility is not implemented for ModelOptNvFp4Config"
    )


DSV4 = {
    "model_type": "deepseek_v4",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "moe_intermediate_size": 128,
    "num_nextn_predict_layers": 1,
    "expert_dtype": "fp4",
}


def _dsv4(qc: dict | None, layer: int, version: str | None = None, **cfg: object):
    """The gate as vLLM picks the config class: load_quant_config reads config.json as vLLM
    does (DSV4 fp8 -> DeepseekV4FP8Config, quant_method quark -> QuarkConfig)."""
    model_cfg = {**DSV4, **cfg, "quantization_config": qc}
    facts = model_facts(model_cfg)
    q = load_quant_config(model_cfg) if qc else None
    return vllm_fse_gate(q, qc, facts, facts.layer(layer), version)


def test_dsv4_native_fp8_checkpoint_is_not_quark_mxfp4():
    native = {"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}
    # 0.33: DeepseekV4FP8Config with fp4 experts (expert_dtype missing counts as fp4)
    r = _dsv4(native, 0)
    assert r.text == "DeepSeek-V4/V4.1 FSE is only implemented/tested with Quark MXFP4"
    no_dtype = {k: v for k, v in DSV4.items() if k != "expert_dtype"}
    facts = model_facts({**no_dtype, "quantization_config": native})
    q = load_quant_config({**no_dtype, "quantization_config": native})
    assert vllm_fse_gate(q, native, facts, facts.layer(0)).code == "dsv4_not_quark_mxfp4"
    # 0.33: fp8 experts are the Fp8Config branch (DeepseekV4FP8Config subclasses it): block
    # FP8, nothing ignored -> compatible
    assert _dsv4(native, 0, expert_dtype="fp8").compatible
    # 0.32: the DSV4 branch for every expert dtype, and its own wording
    r = _dsv4(native, 0, "0.32.0")
    assert r.text == "DeepSeek-v4 FSE is only implemented/tested with Quark MXFP4"
    r = _dsv4(native, 0, "0.32.0", expert_dtype="fp8")
    assert r.text == "DeepSeek-V4 routed experts are not MXFP4"


def test_dsv4_quark_export_takes_the_quark_branch():
    # DeepseekV4FP8Config.override_quantization_method: Quark checkpoints are always
    # QuarkConfig, so the DSV4 exclude / w1 rules do not apply to them
    qc = quark(exclude=["layers.1.ffn.shared_experts.w1"])
    assert _dsv4(qc, 0).compatible
    assert _dsv4(qc, 1).compatible  # exclude names w1, vLLM asks for gate_up_proj / down_proj
    qc = quark(exclude=["layers.1.ffn.shared_experts.gate_up_proj"])
    assert _dsv4(qc, 1).text == "Quark excludes shared experts at layers.1.ffn.shared_experts"


def test_dsv4_branch_exclude_and_mtp_regex_spec():
    # the DSV4 branch itself (reached through DeepseekV4FP8Config) on a Quark MXFP4 dict
    from checkpoint_tool.policy.fse_gates import dsv4_gate

    facts = model_facts(DSV4)
    qc = quark(exclude=["layers.1.ffn.shared_experts.w1"])
    assert dsv4_gate(qc, facts, facts.layer(0)).compatible
    r = dsv4_gate(qc, facts, facts.layer(1))
    assert r.text == "DeepSeek-V4/V4.1 excludes shared experts at layers.1.ffn.shared_experts"
    r = dsv4_gate(qc, facts, facts.layer(1), (0, 32))
    assert r.text == "DeepSeek-V4 excludes shared experts at layers.1.ffn.shared_experts"
    # MTP block: global layer index 2 = num_hidden_layers + 0 -> mtp.0 (vLLM's prefix rule)
    qc = quark(layer_quant_config={r"re:mtp\.0\.ffn\.shared_experts\.w1": fp8_block_spec()})
    r = dsv4_gate(qc, facts, facts.layer(2))
    assert r.text == "DeepSeek-V4/V4.1 shared experts at mtp.0.ffn.shared_experts are not MXFP4"
    assert dsv4_gate(qc, facts, facts.layer(1)).compatible

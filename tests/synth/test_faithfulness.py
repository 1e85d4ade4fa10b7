"""Presets built at a producer fixture's dimensions match the producer's header exactly.

The fixtures (tests/fixtures/producer-headers) list every tensor real AMD Quark 0.13 exports of
a tiny DeepSeek-V3-architecture model wrote, and the quantization configs of DeepSeek-V3/R1
and ModelOpt. The tiny model: hidden 256, 2 layers (the first dense), 4 routed experts, vocab
512; its fused-expert exports (routed experts left BF16 3-D) use moe_intermediate 128, the
per-expert ("preprocessed") export 192.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "producer-headers"
QUARK = "quark-0.13_tiny-deepseek_v3_"
# the fixture model's MLA sizes are not the presets' default (a geometry vLLM loads): ask for them
TINY_FIXTURE_DIMS = {"num_layers": 2, "n_routed": 4, "hidden": 256, "mla": "quark-fixture"}


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _written_tensors(path: Path) -> dict[str, list]:
    cat = open_local(path)
    return {name: [e.dtype, list(e.shape)] for name, e in cat.tensors.items()}


def _diff(got: dict, want: dict) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    return (
        f"missing {missing[:5]} extra {extra[:5]} wrong {[(k, got[k], want[k]) for k in wrong[:5]]}"
    )


@pytest.mark.parametrize(
    ("fixture", "preset", "opts"),
    [
        (
            "fp8-per-tensor",
            "quark-fp8-per-tensor",
            {"fused_experts": True, "moe_intermediate": 128},
        ),
        (
            "mxfp4-global_ptpc-fp8-attn",
            "quark-mxfp4-ptpc-attn",
            {"fused_experts": True, "moe_intermediate": 128},
        ),
        ("nvfp4", "quark-nvfp4", {"fused_experts": True, "moe_intermediate": 128}),
        ("preprocessed-per-expert_mxfp4", "quark-mxfp4-ptpc-attn", {"moe_intermediate": 192}),
    ],
)
def test_quark_preset_matches_producer_header(synth_ckpt, fixture, preset, opts):
    path = synth_ckpt(preset, **TINY_FIXTURE_DIMS, **opts)
    want = _fixture(f"{QUARK}{fixture}.tensors.json")
    got = _written_tensors(path)
    assert got == want, _diff(got, want)
    config = json.loads((path / "config.json").read_text())
    assert config["quantization_config"] == _fixture(f"{QUARK}{fixture}.quantization_config.json")


def test_fixture_dims_are_the_tiny_architecture(synth_ckpt):
    """The config we write for the fixture model reproduces its MLA shapes from config fields."""
    path = synth_ckpt(
        "quark-fp8-per-tensor", **TINY_FIXTURE_DIMS, fused_experts=True, moe_intermediate=128
    )
    cfg = json.loads((path / "config.json").read_text())
    heads = cfg["num_attention_heads"]
    want = _fixture(f"{QUARK}fp8-per-tensor.tensors.json")
    qb = want["model.layers.1.self_attn.q_b_proj.weight"][1]
    assert qb == [heads * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]), cfg["q_lora_rank"]]
    kva = want["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"][1]
    assert kva == [cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], cfg["hidden_size"]]
    assert cfg["first_k_dense_replace"] == 1 and cfg["n_routed_experts"] == 4


def test_deepseek_fp8_quantization_config_is_deepseeks(synth_ckpt):
    config = json.loads((synth_ckpt("deepseek-v3-fp8") / "config.json").read_text())
    assert config["quantization_config"] == _fixture(
        "deepseek-ai_DeepSeek-V3_R1.quantization_config.json"
    )
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert config["model_type"] == "deepseek_v3"


def test_modelopt_hf_quant_config_matches_producer(synth_ckpt):
    path = synth_ckpt("modelopt-nvfp4")
    got = json.loads((path / "hf_quant_config.json").read_text())
    want = _fixture("modelopt_hf_quant_config.vipertsniper_DeepSeek-R1-Distill-Qwen-32B-NVFP4.json")
    # KV-cache FP8 scales of MLA attention are not modelled: that one field differs
    assert got["quantization"].pop("kv_cache_quant_algo") is None
    want["quantization"].pop("kv_cache_quant_algo")
    assert got == want
    assert "quantization_config" not in json.loads((path / "config.json").read_text())

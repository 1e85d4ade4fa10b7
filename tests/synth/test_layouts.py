"""Preset layouts: producer conventions, full-size real shapes, options, sparse output."""

from __future__ import annotations

import json
import os

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import OutputError, UsageError
from checkpoint_tool.synth import build_layout, synth_checkpoint


def _specs(preset: str, **opts) -> dict[str, tuple[str, list[int]]]:
    return {s.name: (s.dtype, list(s.shape)) for s in build_layout(preset, **opts).tensors}


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


# Shapes of the published deepseek-ai/DeepSeek-R1 checkpoint (hidden 7168, 128 heads,
# q_lora 1536, kv_lora 512, 256 experts of 2048, dense intermediate 18432, vocab 129280).
R1_SHAPES = {
    "model.embed_tokens.weight": ("BF16", [129280, 7168]),
    "lm_head.weight": ("BF16", [129280, 7168]),
    "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [7168, 18432]),
    "model.layers.0.mlp.down_proj.weight_scale_inv": ("F32", [56, 144]),
    "model.layers.0.self_attn.q_a_proj.weight_scale_inv": ("F32", [12, 56]),
    "model.layers.0.self_attn.q_b_proj.weight": ("F8_E4M3", [24576, 1536]),
    "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", [576, 7168]),
    "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv": ("F32", [5, 56]),
    "model.layers.0.self_attn.kv_b_proj.weight": ("F8_E4M3", [32768, 512]),
    "model.layers.0.self_attn.o_proj.weight_scale_inv": ("F32", [56, 128]),
    "model.layers.3.mlp.gate.weight": ("BF16", [256, 7168]),
    "model.layers.3.mlp.gate.e_score_correction_bias": ("F32", [256]),
    "model.layers.3.mlp.experts.255.down_proj.weight": ("F8_E4M3", [7168, 2048]),
    "model.layers.3.mlp.experts.255.down_proj.weight_scale_inv": ("F32", [56, 16]),
    "model.layers.60.mlp.shared_experts.gate_proj.weight": ("F8_E4M3", [2048, 7168]),
    "model.layers.61.eh_proj.weight": ("BF16", [7168, 14336]),
    "model.layers.61.embed_tokens.weight": ("BF16", [129280, 7168]),
    "model.layers.61.shared_head.head.weight": ("BF16", [129280, 7168]),
    "model.layers.61.mlp.experts.0.up_proj.weight_scale_inv": ("F32", [16, 56]),
}

# Shapes of the published deepseek-ai/DeepSeek-V4-Flash checkpoint.
V4_FLASH_SHAPES = {
    "embed.weight": ("BF16", [129280, 4096]),
    "head.weight": ("BF16", [129280, 4096]),
    "hc_head_fn": ("F32", [4, 16384]),
    "layers.0.ffn.gate.tid2eid": ("I64", [129280, 6]),
    "layers.3.ffn.gate.bias": ("F32", [256]),
    "layers.5.attn.attn_sink": ("F32", [64]),
    "layers.5.attn.wkv.weight": ("F8_E4M3", [512, 4096]),
    "layers.5.attn.wkv.scale": ("F8_E8M0", [4, 32]),
    "layers.5.attn.wo_a.weight": ("F8_E4M3", [8192, 4096]),
    "layers.5.attn.wo_a.scale": ("F8_E8M0", [64, 32]),
    "layers.5.attn.wo_b.scale": ("F8_E8M0", [32, 64]),
    "layers.5.attn.wq_a.scale": ("F8_E8M0", [8, 32]),
    "layers.5.attn.wq_b.weight": ("F8_E4M3", [32768, 1024]),
    "layers.5.attn.wq_b.scale": ("F8_E8M0", [256, 8]),
    "layers.5.attn.compressor.ape": ("F32", [128, 512]),
    "layers.5.attn.compressor.wkv.weight": ("BF16", [512, 4096]),
    "layers.4.attn.compressor.ape": ("F32", [4, 1024]),
    "layers.4.attn.compressor.wgate.weight": ("BF16", [1024, 4096]),
    "layers.4.attn.compressor.norm.weight": ("BF16", [512]),
    "layers.4.attn.indexer.wq_b.weight": ("F8_E4M3", [8192, 1024]),
    "layers.4.attn.indexer.wq_b.scale": ("F8_E8M0", [64, 8]),
    "layers.4.attn.indexer.weights_proj.weight": ("BF16", [64, 4096]),
    "layers.4.attn.indexer.compressor.ape": ("F32", [4, 256]),
    "layers.4.attn.indexer.compressor.norm.weight": ("BF16", [128]),
    "layers.4.attn.indexer.compressor.wkv.weight": ("BF16", [256, 4096]),
    "layers.7.ffn.experts.255.w1.weight": ("I8", [2048, 2048]),
    "layers.7.ffn.experts.255.w1.scale": ("F8_E8M0", [2048, 128]),
    "layers.7.ffn.experts.255.w2.weight": ("I8", [4096, 1024]),
    "layers.7.ffn.experts.255.w2.scale": ("F8_E8M0", [4096, 64]),
    "layers.7.ffn.shared_experts.w1.weight": ("F8_E4M3", [2048, 4096]),
    "layers.7.ffn.shared_experts.w1.scale": ("F8_E8M0", [16, 32]),
    "layers.7.ffn.shared_experts.w2.scale": ("F8_E8M0", [32, 16]),
    "layers.7.hc_attn_fn": ("F32", [24, 16384]),
    "layers.7.hc_ffn_base": ("F32", [24]),
    "layers.7.hc_ffn_scale": ("F32", [3]),
    "mtp.0.e_proj.weight": ("F8_E4M3", [4096, 4096]),
    "mtp.0.h_proj.scale": ("F8_E8M0", [32, 32]),
    "mtp.0.ffn.gate.bias": ("F32", [256]),
    "mtp.0.hc_head_scale": ("F32", [1]),
    "mtp.0.enorm.weight": ("BF16", [4096]),
}


def test_full_size_deepseek_v4_flash_layout_has_real_shapes():
    specs = _specs("deepseek-v4", sparse=True)
    for name, want in V4_FLASH_SHAPES.items():
        assert specs[name] == want, name
    assert "layers.0.attn.compressor.ape" not in specs  # sliding-window layer
    assert "layers.5.attn.indexer.wq_b.weight" not in specs  # ratio 128: no indexer
    assert "layers.2.ffn.gate.bias" not in specs  # hash-routed layer
    assert "mtp.0.attn.compressor.ape" not in specs
    assert not any(".engram." in n for n in specs)  # V4-Flash has no engram


@pytest.mark.slow
def test_sparse_r1_has_real_shapes_and_holes(tmp_path):
    dst = synth_checkpoint("deepseek-v3-fp8", tmp_path / "r1", sparse=True)
    files = sorted(p.name for p in dst.glob("*.safetensors"))
    assert len(files) == 163
    assert files[0] == "model-00001-of-000163.safetensors"
    cat = open_local(dst)
    assert len(cat.tensors) > 90_000
    for name, (dtype, shape) in R1_SHAPES.items():
        assert (cat.tensors[name].dtype, list(cat.tensors[name].shape)) == (dtype, shape), name
    assert "model.layers.62.input_layernorm.weight" not in cat.tensors
    assert "model.layers.2.mlp.gate.weight" not in cat.tensors  # three dense layers
    logical = sum(p.stat().st_size for p in dst.glob("*.safetensors"))
    on_disk = sum(p.stat().st_blocks * 512 for p in dst.glob("*.safetensors"))
    assert logical > 600e9 and on_disk < 200e6
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(e.nbytes for e in cat.tensors.values())


def test_quark_hybrid_mixes_shared_experts_per_layer(synth_ckpt):
    path = synth_ckpt("quark-hybrid")
    cfg = _config(path)
    q = cfg["quantization_config"]
    tensors = open_local(path).tensors
    # layer 0 dense, 1..3 MoE, 4 = MTP
    excluded_shared = [
        f"model.layers.1.mlp.shared_experts.{p}_proj" for p in ("gate", "up", "down")
    ]
    assert all(m in q["exclude"] for m in excluded_shared)
    for m in excluded_shared:
        assert tensors[f"{m}.weight"].dtype == "BF16" and f"{m}.weight_scale" not in tensors
    fp8_shared = "model.layers.2.mlp.shared_experts.down_proj"
    assert q["layer_quant_config"][fp8_shared]["weight"]["qscheme"] == "per_block"
    assert tensors[f"{fp8_shared}.weight"].dtype == "F8_E4M3"
    assert tensors[f"{fp8_shared}.weight_scale"].dtype == "F32"
    assert tensors[f"{fp8_shared}.weight_scale"].shape == (2, 1)  # ceil([256, 128] / 128)
    mx = "model.layers.3.mlp.shared_experts.gate_proj"
    assert tensors[f"{mx}.weight"].dtype == "U8" and mx not in q["layer_quant_config"]
    assert mx not in q["exclude"]
    attn = "model.layers.0.self_attn.kv_a_proj_with_mqa"
    assert q["layer_quant_config"][attn]["weight"]["block_size"] == [128, 128]
    kv_a_rows = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]  # 512 + 64
    assert tensors[f"{attn}.weight_scale"].shape == (
        -(-kv_a_rows // 128),
        2,
    )  # ceil([576, 256] / 128)
    for router in ("model.layers.1.mlp.gate", "model.layers.4.mlp.gate", "lm_head"):
        assert router in q["exclude"]
    assert tensors["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == "F32"
    assert "model.layers.4.eh_proj" in q["exclude"]
    assert q["global_quant_config"]["weight"]["dtype"] == "fp4"
    index = json.loads((path / "model.safetensors.index.json").read_text())
    files = {p.name: p.stat().st_size for p in path.glob("*.safetensors")}
    assert index["metadata"]["total_size"] == sum(files.values())  # Quark file2file quirk


def test_quark_mxfp4_excludes_bf16_attention_but_not_routers(synth_ckpt):
    path = synth_ckpt("quark-mxfp4")
    q = _config(path)["quantization_config"]
    tensors = open_local(path).tensors
    assert "model.layers.2.self_attn.o_proj" in q["exclude"]
    assert tensors["model.layers.2.self_attn.o_proj.weight"].dtype == "BF16"
    assert "model.layers.2.mlp.gate" not in q["exclude"]  # in-memory flow: not an nn.Linear
    assert tensors["model.layers.2.mlp.experts.7.down_proj.weight_scale"].dtype == "U8"
    assert not any(n.startswith("model.layers.4.") for n in tensors)  # no MTP layer
    assert _config(path)["num_nextn_predict_layers"] == 0


def test_two_shared_experts_are_one_mlp_of_double_width():
    specs = _specs("quark-mxfp4", n_shared=2)
    assert specs["model.layers.1.mlp.shared_experts.gate_proj.weight"] == ("U8", [256, 128])
    assert specs["model.layers.1.mlp.shared_experts.down_proj.weight"] == ("U8", [256, 128])
    assert not any("shared_experts.0" in n for n in specs)


def test_options_change_sizes():
    specs = _specs("quark-mxfp4", num_layers=3, n_routed=5, hidden=128, moe_intermediate=96)
    assert specs["model.layers.2.mlp.experts.4.down_proj.weight"] == ("U8", [128, 48])
    assert specs["model.layers.2.mlp.experts.4.gate_proj.weight_scale"] == ("U8", [96, 4])
    assert "model.layers.3.input_layernorm.weight" not in specs
    assert "model.layers.2.mlp.experts.5.up_proj.weight" not in specs


def test_misaligned_sizes_are_refused_with_the_reason():
    with pytest.raises(UsageError, match="multiple of 32"):
        build_layout("quark-mxfp4", moe_intermediate=48)


def test_unknown_preset_and_bad_fused_option():
    with pytest.raises(UsageError, match="unknown preset"):
        build_layout("nope")
    with pytest.raises(UsageError, match="fused-experts"):
        build_layout("deepseek-v3-fp8", fused_experts=True)


def test_size_overrides_are_bounded_and_named():
    with pytest.raises(UsageError, match="--shared-experts -1: must be at least 0"):
        build_layout("qwen2-moe", n_shared=-1)
    with pytest.raises(UsageError, match="--layers 0: must be at least 1"):
        build_layout("quark-mxfp4", hidden=16, num_layers=0)  # the first in option order
    with pytest.raises(TypeError, match="no size override named layers"):
        build_layout("quark-mxfp4", layers=2)


def test_dims_table_rows_fill_every_column():
    from checkpoint_tool.synth.dims import parse_table

    dims = parse_table(
        """
        field            a    b
        num_layers       2    3
        n_routed         8    8
        n_shared         0    1
        top_k            2    2
        hidden           64   64
        moe_intermediate 32   32
        first_dense      1    .
        engram_layers    1,2  .
        """
    )
    assert (dims["a"].first_dense, dims["a"].engram_layers) == (1, (1, 2))
    assert (dims["b"].num_layers, dims["b"].first_dense, dims["b"].engram_layers) == (3, 0, ())
    assert dims["b"].model_fields_set == {
        "num_layers",
        "n_routed",
        "n_shared",
        "top_k",
        "hidden",
        "moe_intermediate",
    }
    with pytest.raises(ValueError, match="row 'hidden': 1 cells, 2 columns"):
        parse_table("field a b\nhidden 64")


def test_small_shards_put_a_weight_and_its_scale_in_different_files(synth_ckpt):
    path = synth_ckpt("deepseek-v3-fp8", shard_size=20_000)
    cat = open_local(path)
    split = [
        n
        for n, e in cat.tensors.items()
        if n.endswith(".weight_scale_inv")
        and cat.tensors[n.removesuffix("_scale_inv")].file != e.file
    ]
    assert split
    assert len(cat.files) > 20


def test_refuses_non_empty_destination_without_overwrite(tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="--overwrite"):
        synth_checkpoint("quark-mxfp4", dst, n_routed=2, num_layers=2)
    (dst / "notes.txt").unlink()
    synth_checkpoint("quark-mxfp4", dst, n_routed=2, num_layers=2, overwrite=True)
    first = sorted(os.listdir(dst))
    synth_checkpoint("quark-mxfp4", dst, n_routed=1, num_layers=2, overwrite=True)
    assert sorted(os.listdir(dst)) == first
    assert not [p for p in os.listdir(dst) if p.endswith(".partial")]


@pytest.mark.parametrize("foreign", ["README.md", "tokenizer.json", "subfolder/"])
def test_overwrite_refuses_a_folder_synth_did_not_write(tmp_path, foreign):
    """--overwrite on a real checkpoint (anything beside synth's own files) deletes nothing."""
    dst = tmp_path / "real"
    synth_checkpoint("quark-mxfp4", dst, n_routed=2, num_layers=2)
    if foreign.endswith("/"):
        (dst / foreign).mkdir()
    else:
        (dst / foreign).write_text("published")
    before = {p: (dst / p).stat().st_size for p in os.listdir(dst)}
    with pytest.raises(OutputError, match=foreign.rstrip("/") + ": not a file synth writes"):
        synth_checkpoint("quark-mxfp4", dst, n_routed=2, num_layers=2, overwrite=True)
    assert {p: (dst / p).stat().st_size for p in os.listdir(dst)} == before


def test_side_files_are_written(synth_ckpt):
    path = synth_ckpt("quark-mxfp4")
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == 1
    assert "tokenizer_class" in json.loads((path / "tokenizer_config.json").read_text())


def test_deepseek_v4_config_and_engram(synth_ckpt):
    path = synth_ckpt("deepseek-v4")
    cfg = _config(path)
    assert cfg["model_type"] == "deepseek_v4" and cfg["expert_dtype"] == "fp4"
    assert cfg["quantization_config"]["scale_fmt"] == "ue8m0"
    assert len(cfg["compress_ratios"]) == cfg["num_hidden_layers"] + 1
    tensors = open_local(path).tensors
    assert tensors["layers.1.engram.embed.weight"].dtype == "F8_E4M3"
    assert tensors["layers.1.engram.embed.scale"].shape == (256, 4)  # 128 columns / 32
    assert cfg["engram_layer_ids"] == [1]


def test_qwen3_5_moe_names_and_config(synth_ckpt):
    path = synth_ckpt("qwen3.5-moe-mxfp4")
    cfg = _config(path)
    text = cfg["text_config"]
    assert cfg["model_type"] == "qwen3_5_moe" and text["num_experts"] == 8
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    tensors = open_local(path).tensors
    p = "model.language_model.layers.3.mlp"
    assert tensors[f"{p}.shared_expert.down_proj.weight_scale"].dtype == "U8"
    assert tensors[f"{p}.shared_expert_gate.weight"].shape == (1, 256)
    assert tensors[f"{p}.experts.7.gate_proj.weight"].shape == (128, 128)
    q = cfg["quantization_config"]
    assert f"{p}.shared_expert_gate" in q["exclude"] and f"{p}.gate" in q["exclude"]
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv" in q["exclude"]
    assert "model.language_model.layers.3.self_attn.q_proj" in q["exclude"]
    assert tensors["model.language_model.layers.3.self_attn.q_proj.weight"].shape == (512, 256)


def test_deepseek_v4_without_engram_is_v4_flash_as_published() -> None:
    """``engram=False``: no V4.1 engram table and no engram config fields; the rest as is."""
    with_engram = build_layout("deepseek-v4")
    flash = build_layout("deepseek-v4", engram=False)
    names = {t.name for t in with_engram.tensors}
    flash_names = {t.name for t in flash.tensors}
    assert any(".engram." in n for n in names)
    assert flash_names == {n for n in names if ".engram." not in n}
    assert "engram_layer_ids" in with_engram.config
    assert not any(k.startswith("engram") for k in flash.config)
    with pytest.raises(UsageError, match="DeepSeek-V4"):
        build_layout("deepseek-v3-fp8", engram=False)

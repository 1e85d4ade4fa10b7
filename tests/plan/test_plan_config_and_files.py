"""config.json edits, side files, --layers, sharding, collisions, the loader fixed point."""

from __future__ import annotations

import json

import pytest
import yaml
from plan_helpers import outputs, plan_of

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.plan.model import OutputTensor, Piece
from checkpoint_tool.plan.serialize import plan_dump
from checkpoint_tool.plan.sharding import natural_key, shard
from checkpoint_tool.recipes import bundled_dir
from checkpoint_tool.sizes import parse_size


def test_config_records_padded_size_and_conversion_metadata(synth_ckpt):
    cat, plan = plan_of(
        synth_ckpt("quark-hybrid", moe_intermediate=160), tp=2, target="vllm-per-layer-fse"
    )
    config = plan.config
    assert config["moe_intermediate_size"] == 256
    assert cat.config["moe_intermediate_size"] == 160  # the source config is not modified
    meta = config["ckpt"]
    assert meta["recipe"] == "deepseek-v3" and meta["tp"] == 2 and meta["layout"] == "hf"
    assert meta["fse_layers"] == [3, 4] and meta["fse_slots"] == {"3": [8], "4": [8]}
    assert meta["target"] == "vllm-per-layer-fse"
    # everything else is the source config
    rest = {k: v for k, v in config.items() if k not in ("ckpt", "moe_intermediate_size")}
    src = {k: v for k, v in cat.config.items() if k != "moe_intermediate_size"}
    assert rest == src
    # excluded shared experts of a layer that stays shared keep their exact names
    assert "model.layers.1.mlp.shared_experts.gate_proj" in config["quantization_config"]["exclude"]


def test_qwen_separate_shared_width_is_padded_in_text_config(synth_ckpt):
    _, plan = plan_of(synth_ckpt("qwen3.5-moe-mxfp4", moe_intermediate=160), tp=2)
    text = plan.config["text_config"]
    assert text["moe_intermediate_size"] == 192
    assert text["shared_expert_intermediate_size"] == 192
    assert "moe_intermediate_size" not in plan.config
    assert plan.summary.redirected == 0  # qwen3.5-moe recipe: shared experts stay shared
    shared = [
        t
        for t in outputs(plan).values()
        if "shared_expert." in t.name and t.name.endswith("up_proj.weight")
    ]
    assert shared and all(t.shape[0] == 192 for t in shared)


def test_side_files_are_listed_but_not_config_or_index(synth_ckpt):
    _, plan = plan_of(synth_ckpt("deepseek-v3-fp8"), tp=1)
    assert "tokenizer_config.json" in plan.side_files
    assert "generation_config.json" in plan.side_files
    assert "config.json" not in plan.side_files
    assert all(not f.endswith(".safetensors") for f in plan.side_files)


def test_layers_subset_plans_only_those_layers(synth_ckpt):
    cat, plan = plan_of(synth_ckpt("quark-hybrid"), tp=2, layers=[3, 4])
    names = set(outputs(plan))
    assert names and all(".layers.3." in n or ".layers.4." in n for n in names)
    dropped = {d.name: d for d in plan.dropped}
    assert set(dropped) | set(plan.provenance) == set(cat.tensors)
    assert "lm_head.weight" in dropped and dropped["lm_head.weight"].rule == "layers"
    assert plan.config["ckpt"]["layers"] == [3, 4]
    assert plan.summary.dropped_by_rule == {"layers": len(dropped)}
    assert any("partial conversion" in n for n in plan.notes)


def test_collision_is_an_error_naming_both_sources(synth_ckpt, tmp_path):
    recipe = tmp_path / "clash.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "clash",
                "rules": {
                    "regex": [{"match": r"\.q_a_proj\.", "replace": ".kv_a_proj_with_mqa."}],
                    "accept": [{"match": ".*", "reason": "test"}],
                },
            }
        )
    )
    with pytest.raises(
        InputError,
        match=r"kv_a_proj_with_mqa\.weight' and '.*q_a_proj\.weight' would both be written",
    ):
        plan_of(synth_ckpt("deepseek-v3-fp8"), tp=1, recipe=str(recipe))


def test_two_renamed_tensors_on_one_name_is_an_error(synth_ckpt, tmp_path):
    recipe = tmp_path / "clash.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "clash2",
                "rules": {
                    "regex": [
                        {"match": r"\.(q_a_proj|kv_a_proj_with_mqa)\.", "replace": ".x_proj."}
                    ],
                    "accept": [{"match": ".*", "reason": "test"}],
                },
            }
        )
    )
    with pytest.raises(
        InputError, match=r"kv_a_proj_with_mqa\.weight' and '.*q_a_proj\.weight' would both be"
    ):
        plan_of(synth_ckpt("deepseek-v3-fp8"), tp=1, recipe=str(recipe))


def test_a_rule_the_loader_would_apply_twice_is_refused(synth_ckpt, tmp_path):
    doc = yaml.safe_load((bundled_dir() / "deepseek-v4-amd.yaml").read_text())
    for rule in doc["rules"]["suffix"]:
        rule.pop("at_load", None)
    doc["name"] = "broken-v4"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(UsageError, match=r"lm_lm_head\.weight"):
        plan_of(synth_ckpt("deepseek-v4"), tp=1, recipe=str(path))


def _t(name: str, nbytes: int) -> OutputTensor:
    return OutputTensor(name=name, dtype="U8", shape=[nbytes], pieces=[Piece(source=name)])


def test_parse_size():
    assert parse_size("5GB") == 5 * 1000**3
    assert parse_size("4.5GiB") == int(4.5 * 1024**3)
    assert parse_size("500mb") == 500 * 1000**2
    assert parse_size("123") == 123
    for bad in ("5XB", "", "-1", "0"):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_natural_order():
    names = ["a.experts.10.w", "a.experts.2.w", "a.experts.1.w"]
    assert sorted(names, key=natural_key) == ["a.experts.1.w", "a.experts.2.w", "a.experts.10.w"]


def test_shards_are_balanced_keep_layers_together_and_respect_the_limit():
    tensors = [_t("model.embed_tokens.weight", 300)]
    for layer in range(10):
        tensors += [_t(f"model.layers.{layer}.mlp.experts.{e}.w", 25) for e in range(4)]
    tensors += [_t("model.norm.weight", 10), _t("lm_head.weight", 300)]
    total = sum(t.shape[0] for t in tensors)  # 1610
    files = shard(list(reversed(tensors)), 500)
    assert len(files) == 4  # ceil(1610 / 500)
    assert all(f.nbytes <= 500 for f in files)
    assert sum(f.nbytes for f in files) == total
    # each layer (100 bytes) sits in one file; embeddings first, the head last
    for layer in range(10):
        holders = {f.name for f in files for t in f.tensors if f".layers.{layer}." in t.name}
        assert len(holders) == 1
    assert files[0].tensors[0].name == "model.embed_tokens.weight"
    assert files[-1].tensors[-1].name in ("lm_head.weight", "model.norm.weight")
    assert max(f.nbytes for f in files) - min(f.nbytes for f in files) <= 200
    assert [f.name for f in files] == [f"model-0000{i}-of-00004.safetensors" for i in (1, 2, 3, 4)]
    # same input, same files, whatever the order
    again = shard(tensors, 500)
    assert [[t.name for t in f.tensors] for f in again] == [
        [t.name for t in f.tensors] for f in files
    ]


def test_a_layer_larger_than_a_file_is_split_and_a_huge_tensor_gets_its_own_file():
    tensors = [_t(f"model.layers.0.experts.{e}.w", 100) for e in range(10)]
    tensors.append(_t("model.layers.1.big.w", 2000))
    files = shard(tensors, 300)
    assert all(f.nbytes <= 300 for f in files if len(f.tensors) > 1)
    assert any(f.nbytes == 2000 and len(f.tensors) == 1 for f in files)
    assert sum(len(f.tensors) for f in files) == 11


def test_planned_files_respect_max_shard_size(synth_ckpt):
    _, plan = plan_of(synth_ckpt("quark-mxfp4"), tp=1, max_shard_size=400_000)
    assert len(plan.files) > 2
    for f in plan.files:
        assert f.nbytes <= 400_000 or len(f.tensors) == 1
    assert sum(s.nbytes for s in plan.summary.files) == plan.summary.output_bytes
    json.dumps(plan_dump(plan))


def test_a_per_layer_width_list_is_padded_with_the_width_key():
    """Hunyuan MoE V1 keeps ``moe_intermediate_size`` as a per-layer list beside its width key
    ``intermediate_size``; vLLM's Transformers backend reads the list entry of each layer, so
    a padded output rewrites both (entries of another width are left alone)."""
    from checkpoint_tool.plan.config_edit import edit_config
    from checkpoint_tool.plan.geometry import Geometry

    src = {"intermediate_size": 160, "moe_intermediate_size": [160, 160, 96], "hidden_size": 64}
    geo = Geometry(tp=2, moe_tp=2, size=160, padded=192, size_key="intermediate_size")
    out, _ = edit_config(src, geometry=geo, module_renames={}, metadata={})
    assert out is not None
    assert out["intermediate_size"] == 192
    assert out["moe_intermediate_size"] == [192, 192, 96]
    assert src["moe_intermediate_size"] == [160, 160, 96], "the source config is not edited"
    unpadded, _ = edit_config(
        src, geometry=Geometry(size=160, padded=160, size_key="intermediate_size"),
        module_renames={}, metadata={},
    )  # fmt: skip
    assert unpadded is not None and unpadded["moe_intermediate_size"] == [160, 160, 96]

"""What ``--layout vllm-sharded`` refuses, each with one line naming the tensor and what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import AlignmentError, InputError, UsageError
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import PlanOptions

INDEX = "model.safetensors.index.json"


def edited_copy(src: Path, dst: Path, drop=(), add=None) -> Path:  # type: ignore[no-untyped-def]
    """Copy checkpoint ``src`` to ``dst`` without tensors ``drop`` and with ``add`` (name ->
    tensor, written to the first shard), fixing the index."""
    shutil.copytree(src, dst)
    index = json.loads((dst / INDEX).read_text())
    weight_map = index["weight_map"]
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        with safe_open(str(dst / shard), framework="pt") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys() if k not in drop}
        if shard == shards[0] and add:
            tensors.update(add)
        save_file(tensors, str(dst / shard), metadata={"format": "pt"})
    for name in drop:
        del weight_map[name]
    for name in add or {}:
        weight_map[name] = shards[0]
    (dst / INDEX).write_text(json.dumps(index))
    return dst


def plan(src: Path, tp: int = 2, **kw):  # type: ignore[no-untyped-def]
    ep = kw.pop("ep", False)
    return plan_for_catalog(open_local(src), PlanOptions(tp=tp, layout="vllm-sharded", **kw), ep=ep)


@pytest.mark.parametrize(
    "missing",
    [
        "model.layers.2.post_attention_layernorm.weight",
        "model.layers.1.mlp.experts.2.down_proj.weight_scale",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
        "lm_head.weight",
    ],
)
def test_a_tensor_the_spec_requires_but_the_checkpoint_lacks_is_named(
    layout_src, tmp_path, missing
):
    src = edited_copy(layout_src("quark-mxfp4"), tmp_path / "ckpt", drop=[missing])
    with pytest.raises(InputError) as exc:
        plan(src)
    message = str(exc.value)
    assert missing in message and "missing" in message
    assert "\n" not in message


def test_a_tensor_vllm_has_no_parameter_for_is_named(layout_src, tmp_path):
    extra = "model.layers.1.self_attn.kv_b_proj.bias"
    add = {extra: torch.randn(128, dtype=torch.float32).to(torch.bfloat16)}
    src = edited_copy(layout_src("quark-mxfp4"), tmp_path / "ckpt", add=add)
    with pytest.raises(InputError, match=extra.replace(".", r"\.")):
        plan(src)


def test_block_fp8_attention_that_vllm_cannot_merge_is_refused(synth_ckpt):
    # DeepSeek FP8 in the Quark fixtures' MLA geometry: q_lora_rank 64 is not a whole 128-row
    # block, so fused_qkv_a_proj's scales cannot be concatenated (vLLM's
    # validate_fp8_block_shape refuses it too); the presets' default geometry plans
    with pytest.raises(AlignmentError, match=r"q_a_proj.*128"):
        plan(synth_ckpt("deepseek-v3-fp8", n_routed=4, mla="quark-fixture"), tp=1)
    assert plan(synth_ckpt("deepseek-v3-fp8", n_routed=4), tp=1).files


def test_tp_that_splits_a_block_is_refused(layout_src):
    # aligned attention sizes, but o_proj's 512 input columns over 8 ranks are 64: half a block
    with pytest.raises(AlignmentError, match="128"):
        plan(layout_src("deepseek-v3-fp8"), tp=8)


def test_fused_3d_experts_are_refused(synth_ckpt):
    src = synth_ckpt("quark-mxfp4", n_routed=4, fused_experts=True)
    with pytest.raises(UsageError, match="--layout hf"):
        plan(src, fse="off")


def test_expert_parallel_is_refused(layout_src):
    with pytest.raises(UsageError, match="--ep"):
        plan(layout_src("quark-mxfp4"), ep=True)


def test_a_family_without_a_spec_is_refused(synth_ckpt):
    with pytest.raises(UsageError, match="deepseek_v4"):
        plan(synth_ckpt("deepseek-v4"), tp=1)


def test_mtp_layers_are_dropped_by_rule(sharded):
    _cat, p, _dst = sharded("deepseek-v3-fp8", 1)
    mtp = [d for d in p.dropped if d.rule == "vllm_sharded_mtp"]
    assert mtp and all(d.name.startswith("model.layers.4.") for d in mtp)
    assert "DeepSeekMTP" in mtp[0].reason
    assert p.summary.dropped_by_rule["vllm_sharded_mtp"] == len(mtp)


def test_merged_shards_whose_quark_specs_differ_in_any_key_are_refused(synth_ckpt, tmp_path):
    """vLLM deep-compares the specs of the shards it merges (quark.py,
    QuarkConfig._find_matched_config: "requires all to use the same scheme"), so a key that
    changes no byte (``observer_cls``) still makes vLLM refuse: so does the layout."""
    src = tmp_path / "ckpt"
    shutil.copytree(synth_ckpt("quark-hybrid"), src)
    config = json.loads((src / "config.json").read_text())
    spec = config["quantization_config"]["layer_quant_config"]["model.layers.0.self_attn.q_a_proj"]
    spec["weight"]["observer_cls"] = "PerChannelMinMaxObserver"
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"vLLM merges .*q_a_proj.*kv_a_proj_with_mqa"):
        plan(src)
    plan(synth_ckpt("quark-hybrid"))  # the untouched checkpoint plans

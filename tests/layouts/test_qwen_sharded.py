"""vllm-sharded for Qwen2-MoE / Qwen3-MoE (``targets/vllm-0.33/qwen_moe.yaml``): the per-rank
tensors are cut from the source the way vLLM's QKVParallelLinear / MergedColumnParallelLinear /
RoutedExperts loaders place them (checked here against slices of the source tensors computed
independently); that vLLM loads them and computes the source's logprobs is
tests/vllm/test_qwen_engine.py."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from checkpoint_tool.catalog import open_local, read_tensor
from checkpoint_tool.errors import AlignmentError, UsageError
from checkpoint_tool.synth.families.qwen_moe import transformers5_config

from .reference import load_ranks


def _src(synth_ckpt, name):  # type: ignore[no-untyped-def]
    return open_local(synth_ckpt(name))


def test_qwen2_qkv_bias_and_shared_expert_gate_per_rank(sharded):
    cat, _plan, dst = sharded("qwen2-moe", 2)
    ranks = load_ranks(dst, 2)
    L = "model.layers.1"
    q, k, v = (read_tensor(cat, f"{L}.self_attn.{p}_proj.bias") for p in "qkv")
    qw = read_tensor(cat, f"{L}.self_attn.q_proj.weight")
    kw = read_tensor(cat, f"{L}.self_attn.k_proj.weight")
    for r in range(2):

        def half(t: torch.Tensor, r: int = r) -> torch.Tensor:
            n = t.shape[0] // 2
            return t[r * n : (r + 1) * n]

        assert torch.equal(
            ranks[r][f"{L}.self_attn.qkv_proj.bias"], torch.cat([half(q), half(k), half(v)])
        )
        w = ranks[r][f"{L}.self_attn.qkv_proj.weight"]
        assert torch.equal(w[: qw.shape[0] // 2], half(qw))
        assert torch.equal(w[qw.shape[0] // 2 : qw.shape[0] // 2 + kw.shape[0] // 2], half(kw))
        assert f"{L}.mlp.gate.weight" in ranks[r]
        gate = ranks[r][f"{L}.mlp.experts._shared_experts._layer.expert_gate.weight"]
        assert torch.equal(gate, read_tensor(cat, f"{L}.mlp.shared_expert_gate.weight"))
        w13 = ranks[r][f"{L}.mlp.experts.routed_experts.w13_weight"]
        up = read_tensor(cat, f"{L}.mlp.experts.3.up_proj.weight")
        i_r = up.shape[0] // 2
        assert torch.equal(w13[3, i_r:], up[r * i_r : (r + 1) * i_r])


def test_qwen3_has_head_norms_and_no_shared_expert(sharded):
    _cat, plan, dst = sharded("qwen3-moe", 2)
    names = set(load_ranks(dst, 2)[1])
    assert "model.layers.2.self_attn.q_norm.weight" in names
    # Qwen3MoeSparseMoeBlock hands its router to FusedMoEFactory(gate=...): MoERunner.gate
    # is the smaller alias; Qwen2-MoE keeps mlp.gate (below)
    assert "model.layers.2.mlp.experts.gate.weight" in names
    assert "model.layers.2.mlp.gate.weight" not in names
    assert not any("shared" in n or n.endswith(".bias") for n in names)
    assert not plan.dropped


def test_kv_heads_that_tp_does_not_divide_are_refused(sharded):
    with pytest.raises(AlignmentError, match="heads"):
        sharded("qwen3-moe", 4)  # 2 KV heads: vLLM would replicate them


def test_transformers5_config_plans_like_transformers4(synth_ckpt, tmp_path):
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions

    src = tmp_path / "t5"
    shutil.copytree(synth_ckpt("qwen3-moe"), src)
    cfg = transformers5_config(json.loads((src / "config.json").read_text()))
    (src / "config.json").write_text(json.dumps(cfg))
    opts = PlanOptions(tp=2, layout="vllm-sharded")
    got = plan_for_catalog(open_local(src), opts)
    want = plan_for_catalog(_src(synth_ckpt, "qwen3-moe"), opts)
    assert [t.name for f in got.files for t in f.tensors] == [
        t.name for f in want.files for t in f.tensors
    ]


def test_other_qwen_architectures_are_refused(synth_ckpt):
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions

    with pytest.raises(UsageError, match="Qwen3_5Moe"):
        plan_for_catalog(
            open_local(synth_ckpt("qwen3.5-moe-mxfp4")), PlanOptions(layout="vllm-sharded")
        )

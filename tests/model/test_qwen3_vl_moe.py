"""Qwen3-VL-MoE as vLLM 0.33 reads it (``model_executor/models/qwen3_vl_moe.py``).

``Qwen3VLMoeDecoderLayer`` builds Qwen3-MoE layers with
``is_fused_checkpoint_transposed=True``: the checkpoint stores each layer's routed experts as
``mlp.experts.gate_up_proj [E, H, 2I]`` and ``mlp.experts.down_proj [E, I, H]``, which
``RoutedExperts.load_weights`` transposes (``_orient_fused_weight``) before chunking gate_up
in two. The family table says so per model type (``naming_by_model_type``); Qwen3-MoE itself
keeps its per-expert default.
"""

from __future__ import annotations

from checkpoint_tool.model import model_facts
from checkpoint_tool.model.families import loads_fused_experts

H, INTER, E, N = 512, 128, 8, 2

TEXT = {
    "model_type": "qwen3_vl_moe_text",
    "hidden_size": H,
    "num_hidden_layers": N,
    "num_experts": E,
    "moe_intermediate_size": INTER,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
WRAPPER = {
    "model_type": "qwen3_vl_moe",
    "architectures": ["Qwen3VLMoeForConditionalGeneration"],
    "text_config": TEXT,
}


def _names() -> set[str]:
    root = "model.language_model.layers"
    return {
        f"{root}.{i}.mlp.{leaf}"
        for i in range(N)
        for leaf in ("gate.weight", "experts.gate_up_proj", "experts.down_proj")
    }


def test_wrapper_facts_read_fused_in_out_experts():
    facts = model_facts(WRAPPER, _names())
    assert facts.family == "qwen3_moe"
    assert facts.moe_layer_indices == [0, 1]
    layer = facts.moe_layers[0]
    assert layer.prefix == "model.language_model.layers.0.mlp"
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 0, INTER)
    assert layer.naming.routed_layout == "fused_3d"
    assert layer.naming.fused_3d_order == "in_out"
    # gate_up [E, H, 2I]: the width on the last axis; down [E, I, H]: on the middle one
    assert layer.naming.intermediate_dim("gate", (E, H, 2 * INTER), fused_gate_up=True) == INTER
    assert layer.naming.intermediate_dim("down", (E, INTER, H), fused_gate_up=False) == INTER


def test_only_qwen3_vl_moe_loads_fused_experts_natively():
    assert loads_fused_experts(WRAPPER)
    assert loads_fused_experts(TEXT)
    assert not loads_fused_experts({**TEXT, "model_type": "qwen3_moe"})
    qwen3 = model_facts({**TEXT, "model_type": "qwen3_moe"}, None)
    assert qwen3.moe_layers[0].naming.fused_3d_order == "out_in"
    assert qwen3.moe_layers[0].naming.routed_layout == "per_expert"

"""Qwen2-MoE and Qwen3-MoE architectures: config.json fields and checkpoint parameters.

Names are the Hugging Face checkpoint names of Qwen/Qwen1.5-MoE-A2.7B (``qwen2_moe``) and
Qwen/Qwen3-30B-A3B (``qwen3_moe``): GQA attention ``self_attn.{q,k,v,o}_proj`` (Qwen2-MoE:
``q/k/v`` with a bias; Qwen3-MoE: ``q_norm``/``k_norm`` per head, no bias), every layer MoE
(``decoder_sparse_step`` 1) with ``mlp.gate`` [E, H] and per-expert
``mlp.experts.E.{gate,up,down}_proj``; Qwen2-MoE adds one ``mlp.shared_expert`` MLP of width
``shared_expert_intermediate_size`` and its sigmoid ``mlp.shared_expert_gate`` [1, H].

Example::

    items = list(qwen_moe_items(QWEN_MOE_TINY, version=2))
    items[3]   # Plain("model.layers.0.self_attn.q_proj.bias", "BF16", (256,))
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.families.common import qwen_moe_block, shared_intermediate
from checkpoint_tool.synth.layout import Item, Linear, Plain


def qwen_moe_config(d: Dims, version: int, quantization_config: dict | None = None) -> dict:
    """config.json as transformers 4.x saves Qwen2MoeConfig (2) / Qwen3MoeConfig (3)."""
    cfg: dict = {
        "architectures": ["Qwen2MoeForCausalLM" if version == 2 else "Qwen3MoeForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": d.hidden,
        "initializer_range": 0.02,
        "intermediate_size": d.intermediate,
        "max_position_embeddings": 32768,
        "max_window_layers": d.num_layers,
        "mlp_only_layers": [],
        "model_type": "qwen2_moe" if version == 2 else "qwen3_moe",
        "moe_intermediate_size": d.moe_intermediate,
        "norm_topk_prob": version == 3,
        "num_attention_heads": d.heads,
        "num_experts": d.n_routed,
        "num_experts_per_tok": d.top_k,
        "num_hidden_layers": d.num_layers,
        "num_key_value_heads": d.kv_heads,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": d.vocab,
    }
    if version == 2:
        cfg["shared_expert_intermediate_size"] = shared_intermediate(d) if d.n_shared else 0
    else:
        cfg["attention_bias"] = False
        cfg["head_dim"] = d.head_dim
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    return dict(sorted(cfg.items()))


def transformers5_config(cfg: dict) -> dict:
    """``cfg`` as transformers 5 saves it: Qwen3MoeConfig maps ``num_experts`` to
    ``num_local_experts`` (attribute_map), ``rope_theta`` moves into ``rope_parameters``."""
    out = dict(cfg)
    if out.get("model_type") == "qwen3_moe":
        out["num_local_experts"] = out.pop("num_experts")
    theta = out.pop("rope_theta", None)
    out.pop("rope_scaling", None)
    if theta is not None:
        out["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    out["dtype"] = out.pop("torch_dtype", "bfloat16")
    out["transformers_version"] = "5.0.0"
    return dict(sorted(out.items()))


def qwen_moe_items(d: Dims, version: int) -> Iterator[Item]:
    h = d.hidden
    yield Plain("model.embed_tokens.weight", "BF16", (d.vocab, h))
    for layer in range(d.num_layers):
        p = f"model.layers.{layer}"
        yield Plain(f"{p}.input_layernorm.weight", "BF16", (h,), init="norm")
        yield from _attention(d, f"{p}.self_attn", layer, version)
        yield Plain(f"{p}.post_attention_layernorm.weight", "BF16", (h,), init="norm")
        yield from qwen_moe_block(d, f"{p}.mlp", layer, shared=version == 2 and d.n_shared > 0)
    yield Plain("model.norm.weight", "BF16", (h,), init="norm")
    yield Linear("lm_head", d.vocab, h, role="lm_head")


def _attention(d: Dims, a: str, layer: int, version: int) -> Iterator[Item]:
    h = d.hidden
    hd = d.head_dim if version == 3 else h // d.heads
    sizes = {"q_proj": d.heads * hd, "k_proj": d.kv_heads * hd, "v_proj": d.kv_heads * hd}
    for name, rows in sizes.items():
        yield Linear(f"{a}.{name}", rows, h, role="attn", layer=layer)
        if version == 2:
            yield Plain(f"{a}.{name}.bias", "BF16", (rows,), init="small")
    yield Linear(f"{a}.o_proj", h, d.heads * hd, role="attn", layer=layer)
    if version == 3:
        yield Plain(f"{a}.q_norm.weight", "BF16", (hd,), init="norm")
        yield Plain(f"{a}.k_norm.weight", "BF16", (hd,), init="norm")

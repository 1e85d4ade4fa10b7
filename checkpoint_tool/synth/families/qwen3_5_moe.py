"""Qwen3.5-MoE architecture (text model): config.json fields and checkpoint parameters.

Qwen3.5-MoE checkpoints are multimodal (``Qwen3_5MoeForConditionalGeneration``): text weights
live under ``model.language_model.``, the model fields under ``text_config``. The vision tower
(``model.visual.*``, ``vision_config``) is not written. Layers follow ``layer_types``: every
``full_attention_interval``-th layer is gated full attention (``self_attn.{q,k,v,o}_proj``,
``q_proj`` twice as wide for the output gate, ``q_norm``/``k_norm``), the others gated delta-net
linear attention (``linear_attn.in_proj_{qkv,z,b,a}``, ``conv1d``, ``A_log``, ``dt_bias``,
``norm``, ``out_proj``). Every layer is MoE: ``mlp.gate``, ``mlp.experts.E.{gate,up,down}_proj``,
one ``mlp.shared_expert`` (singular) and its ``mlp.shared_expert_gate`` [1, hidden].

The text config also carries the Qwen3-MoE fields ``decoder_sparse_step``, ``mlp_only_layers``
and ``norm_topk_prob`` (every layer sparse, top-k renormalised).
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.families.common import qwen_moe_block, shared_intermediate
from checkpoint_tool.synth.layout import Item, Linear, Plain

PREFIX = "model.language_model"


def layer_types(d: Dims) -> list[str]:
    n = d.full_attention_interval
    return [
        "full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(d.num_layers)
    ]


def qwen3_5_moe_config(d: Dims, quantization_config: dict | None) -> dict:
    text = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "decoder_sparse_step": 1,
        "dtype": "bfloat16",
        "eos_token_id": 248044,
        "full_attention_interval": d.full_attention_interval,
        "head_dim": d.head_dim,
        "hidden_act": "silu",
        "hidden_size": d.hidden,
        "initializer_range": 0.02,
        "layer_types": layer_types(d),
        "linear_conv_kernel_dim": d.conv_kernel,
        "linear_key_head_dim": d.linear_k_dim,
        "linear_num_key_heads": d.linear_k_heads,
        "linear_num_value_heads": d.linear_v_heads,
        "linear_value_head_dim": d.linear_v_dim,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_moe_text",
        "moe_intermediate_size": d.moe_intermediate,
        "mtp_num_hidden_layers": d.mtp_layers,
        "norm_topk_prob": True,
        "num_attention_heads": d.heads,
        "num_experts": d.n_routed,
        "num_experts_per_tok": d.top_k,
        "num_hidden_layers": d.num_layers,
        "num_key_value_heads": d.kv_heads,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "rope_type": "default",
        },
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": shared_intermediate(d),
        "use_cache": True,
        "vocab_size": d.vocab,
    }
    cfg: dict = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "image_token_id": 248056,
        "model_type": "qwen3_5_moe",
        "text_config": text,
        "tie_word_embeddings": False,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": 248057,
        "vision_end_token_id": 248054,
        "vision_start_token_id": 248053,
    }
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    return cfg


def qwen3_5_moe_items(d: Dims) -> Iterator[Item]:
    h = d.hidden
    yield Plain(f"{PREFIX}.embed_tokens.weight", "BF16", (d.vocab, h))
    for layer, kind in enumerate(layer_types(d)):
        p = f"{PREFIX}.layers.{layer}"
        yield Plain(f"{p}.input_layernorm.weight", "BF16", (h,), init="norm")
        if kind == "full_attention":
            yield from _full_attention(d, f"{p}.self_attn", layer)
        else:
            yield from _linear_attention(d, f"{p}.linear_attn", layer)
        yield Plain(f"{p}.post_attention_layernorm.weight", "BF16", (h,), init="norm")
        yield from qwen_moe_block(d, f"{p}.mlp", layer, shared=d.n_shared > 0)
    yield Plain(f"{PREFIX}.norm.weight", "BF16", (h,), init="norm")
    yield Linear("lm_head", d.vocab, h, role="lm_head")


def _full_attention(d: Dims, a: str, layer: int) -> Iterator[Item]:
    h, hd = d.hidden, d.head_dim
    yield Linear(f"{a}.q_proj", 2 * d.heads * hd, h, role="attn", layer=layer)
    yield Linear(f"{a}.k_proj", d.kv_heads * hd, h, role="attn", layer=layer)
    yield Linear(f"{a}.v_proj", d.kv_heads * hd, h, role="attn", layer=layer)
    yield Linear(f"{a}.o_proj", h, d.heads * hd, role="attn", layer=layer)
    yield Plain(f"{a}.q_norm.weight", "BF16", (hd,), init="norm")
    yield Plain(f"{a}.k_norm.weight", "BF16", (hd,), init="norm")


def _linear_attention(d: Dims, a: str, layer: int) -> Iterator[Item]:
    h = d.hidden
    key = d.linear_k_heads * d.linear_k_dim
    value = d.linear_v_heads * d.linear_v_dim
    conv = 2 * key + value
    yield Linear(f"{a}.in_proj_qkv", conv, h, role="attn", layer=layer)
    yield Linear(f"{a}.in_proj_z", value, h, role="attn", layer=layer)
    yield Linear(f"{a}.in_proj_b", d.linear_v_heads, h, role="attn", layer=layer)
    yield Linear(f"{a}.in_proj_a", d.linear_v_heads, h, role="attn", layer=layer)
    yield Plain(f"{a}.conv1d.weight", "BF16", (conv, 1, d.conv_kernel))
    yield Plain(f"{a}.A_log", "BF16", (d.linear_v_heads,), init="small")
    yield Plain(f"{a}.dt_bias", "BF16", (d.linear_v_heads,), init="norm")
    yield Plain(f"{a}.norm.weight", "BF16", (d.linear_v_dim,), init="norm")
    yield Linear(f"{a}.out_proj", h, value, role="attn", layer=layer)

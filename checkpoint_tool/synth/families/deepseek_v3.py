"""DeepSeek-V3/R1 architecture: config.json fields and the checkpoint's parameters in order.

Names are the Hugging Face checkpoint names of deepseek-ai/DeepSeek-V3 (MLA attention with
``q_a_proj``/``q_b_proj``/``kv_a_proj_with_mqa``/``kv_b_proj``/``o_proj``, dense MLPs in the
first ``first_k_dense_replace`` layers, MoE layers with ``mlp.gate`` + ``e_score_correction_bias``,
per-expert ``mlp.experts.E.{gate,up,down}_proj`` and one ``mlp.shared_experts`` MLP of width
``n_shared_experts * moe_intermediate_size``), then the MTP layer(s) ``model.layers.{N+k}``
with ``embed_tokens``, ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.{norm,head}``.

Example::

    items = list(deepseek_v3_items(DEEPSEEK_V3_TINY, router_bias_dtype="F32"))
    items[0]   # Plain("model.embed_tokens.weight", "BF16", (512, 256))
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.families.common import deepseek_moe_fields, gated_mlp
from checkpoint_tool.synth.layout import Item, Linear, Plain


def deepseek_v3_config(d: Dims, quantization_config: dict | None) -> dict:
    """config.json of deepseek-ai/DeepSeek-V3 with the sizes of ``d``."""
    cfg: dict = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_deepseek.DeepseekV3Config",
            "AutoModel": "modeling_deepseek.DeepseekV3Model",
            "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
        },
        "aux_loss_alpha": 0.001,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": d.first_dense,
        "hidden_act": "silu",
        "hidden_size": d.hidden,
        "initializer_range": 0.02,
        "intermediate_size": d.intermediate,
        "kv_lora_rank": d.kv_lora_rank,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": d.moe_intermediate,
        "moe_layer_freq": 1,
        "n_group": 8 if d.n_routed % 8 == 0 and d.n_routed >= 64 else 1,
        **deepseek_moe_fields(d),
        "num_key_value_heads": d.heads,
        "num_nextn_predict_layers": d.mtp_layers,
        "pretraining_tp": 1,
        "q_lora_rank": d.q_lora_rank,
        "qk_nope_head_dim": d.qk_nope,
        "qk_rope_head_dim": d.qk_rope,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 4 if d.n_routed % 8 == 0 and d.n_routed >= 64 else 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1",
        "use_cache": True,
        "v_head_dim": d.v_head,
        "vocab_size": d.vocab,
    }
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    return dict(sorted(cfg.items()))


def deepseek_v3_items(
    d: Dims,
    *,
    router_bias_dtype: str = "F32",
    fused_routed: bool = False,
    mtp: bool = True,
) -> Iterator[Item]:
    """The checkpoint's parameters, layer by layer (embed first, MTP layer(s) last).

    ``fused_routed`` writes routed experts the way Quark exports models with fused 3-D expert
    parameters: BF16 ``mlp.experts.gate_up_proj`` [E, 2I, H] and ``mlp.experts.down_proj``
    [E, H, I]. ``mtp`` adds the MTP layer(s) (Quark's in-memory exports drop them).
    """
    h = d.hidden
    yield Plain("model.embed_tokens.weight", "BF16", (d.vocab, h))
    for layer in range(d.num_layers):
        yield from _decoder_layer(d, layer, router_bias_dtype, fused_routed)
    yield Plain("model.norm.weight", "BF16", (h,), init="norm")
    yield Linear("lm_head", d.vocab, h, role="lm_head")
    if mtp:
        for k in range(d.mtp_layers):
            layer = d.num_layers + k
            p = f"model.layers.{layer}"
            yield Plain(f"{p}.embed_tokens.weight", "BF16", (d.vocab, h))
            yield Plain(f"{p}.enorm.weight", "BF16", (h,), init="norm")
            yield Plain(f"{p}.hnorm.weight", "BF16", (h,), init="norm")
            yield Linear(f"{p}.eh_proj", h, 2 * h, role="mtp_proj", layer=layer)
            yield from _decoder_layer(d, layer, router_bias_dtype, fused_routed)
            yield Plain(f"{p}.shared_head.norm.weight", "BF16", (h,), init="norm")
            yield Linear(f"{p}.shared_head.head", d.vocab, h, role="mtp_head", layer=layer)


def _decoder_layer(d: Dims, layer: int, router_bias_dtype: str, fused: bool) -> Iterator[Item]:
    h = d.hidden
    p = f"model.layers.{layer}"
    yield Plain(f"{p}.input_layernorm.weight", "BF16", (h,), init="norm")
    yield from _mla(d, p, layer)
    yield Plain(f"{p}.post_attention_layernorm.weight", "BF16", (h,), init="norm")
    if layer < d.first_dense:
        yield from gated_mlp(f"{p}.mlp", h, d.intermediate, "dense_mlp", layer)
        return
    yield Linear(f"{p}.mlp.gate", d.n_routed, h, role="router", layer=layer)
    yield Plain(f"{p}.mlp.gate.e_score_correction_bias", router_bias_dtype, (d.n_routed,), "bias")
    if fused:
        i = d.moe_intermediate
        yield Plain(f"{p}.mlp.experts.gate_up_proj", "BF16", (d.n_routed, 2 * i, h))
        yield Plain(f"{p}.mlp.experts.down_proj", "BF16", (d.n_routed, h, i))
    else:
        for e in range(d.n_routed):
            yield from gated_mlp(f"{p}.mlp.experts.{e}", h, d.moe_intermediate, "routed", layer, e)
    if d.n_shared:
        yield from gated_mlp(
            f"{p}.mlp.shared_experts", h, d.n_shared * d.moe_intermediate, "shared", layer
        )


def _mla(d: Dims, p: str, layer: int) -> Iterator[Item]:
    h, a = d.hidden, f"{p}.self_attn"
    qk_head = d.qk_nope + d.qk_rope
    if d.q_lora_rank:
        yield Linear(f"{a}.q_a_proj", d.q_lora_rank, h, role="attn", layer=layer)
        yield Plain(f"{a}.q_a_layernorm.weight", "BF16", (d.q_lora_rank,), init="norm")
        yield Linear(f"{a}.q_b_proj", d.heads * qk_head, d.q_lora_rank, role="attn", layer=layer)
    else:
        yield Linear(f"{a}.q_proj", d.heads * qk_head, h, role="attn", layer=layer)
    yield Linear(f"{a}.kv_a_proj_with_mqa", d.kv_lora_rank + d.qk_rope, h, "attn", layer)
    yield Plain(f"{a}.kv_a_layernorm.weight", "BF16", (d.kv_lora_rank,), init="norm")
    yield Linear(f"{a}.kv_b_proj", d.heads * (d.qk_nope + d.v_head), d.kv_lora_rank, "attn", layer)
    yield Linear(f"{a}.o_proj", h, d.heads * d.v_head, role="attn", layer=layer)

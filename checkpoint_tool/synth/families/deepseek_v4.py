"""DeepSeek-V4 architecture (V4-Flash layout): config.json fields and checkpoint parameters.

Native names, no ``model.`` prefix: ``embed.weight``, ``layers.N.attn.{wq_a,wq_b,wkv,wo_a,wo_b}``
(+ ``q_norm``, ``kv_norm``, ``attn_sink``), a KV ``compressor`` on layers with a compress
ratio (``ape``, ``wkv``, ``wgate``, ``norm``; ratio 4 overlaps: twice the width) and an
``indexer`` on ratio-4 layers (``wq_b``, ``weights_proj``, its own compressor);
manifold hyper-connections ``hc_{attn,ffn}_{fn,base,scale}`` per layer and ``hc_head_*`` at the
top; MoE ``ffn.gate.weight`` with ``ffn.gate.bias`` (or ``ffn.gate.tid2eid`` on the first
``num_hash_layers`` hash-routed layers), ``ffn.experts.E.w1|w2|w3`` (w1 gate, w3 up, w2 down)
and ``ffn.shared_experts.w1|w2|w3``; ``mtp.K.*`` blocks with ``e_proj``/``h_proj``,
``enorm``/``hnorm``/``norm`` and their own ``hc_head_*``. Optional DeepSeek-V4.1 engram
tables ``layers.N.engram.embed`` (FP8 rows + E8M0 scale per 32 columns) on
``engram_layer_ids``.

Shapes follow the published V4-Flash checkpoint, e.g. ``attn.wo_a`` is
``[o_groups * o_lora_rank, heads * head_dim / o_groups]`` and ``hc_attn_fn`` is
``[(2 + hc_mult) * hc_mult, hc_mult * hidden]`` in F32.
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.families.common import deepseek_moe_fields
from checkpoint_tool.synth.layout import Item, Linear, Plain


def compress_ratios(d: Dims) -> list[int]:
    """V4-Flash pattern: two sliding-window layers, then 4 (CSA) / 128 (HCA) alternating;
    MTP layers are sliding-window (0). One entry per main and MTP layer."""
    main = [0 if i < 2 else (4 if i % 2 == 0 else 128) for i in range(d.num_layers)]
    return main + [0] * d.mtp_layers


def engram_layers(d: Dims) -> list[int]:
    """Engram layer ids that exist with ``d.num_layers`` main layers."""
    return [layer for layer in d.engram_layers if layer < d.num_layers]


def deepseek_v4_config(d: Dims, quantization_config: dict) -> dict:
    """config.json of deepseek-ai/DeepSeek-V4-Flash with the sizes of ``d``."""
    cfg: dict = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "expert_dtype": "fp4",
        "hc_eps": 1e-06,
        "hc_mult": d.hc_mult,
        "hc_sinkhorn_iters": 20,
        "head_dim": d.head_dim,
        "hidden_act": "silu",
        "hidden_size": d.hidden,
        "index_head_dim": d.index_head_dim,
        "index_n_heads": d.index_n_heads,
        "index_topk": 512,
        "initializer_range": 0.02,
        "max_position_embeddings": 1048576,
        "model_type": "deepseek_v4",
        "moe_intermediate_size": d.moe_intermediate,
        **deepseek_moe_fields(d),
        "num_hash_layers": d.num_hash_layers,
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": d.mtp_layers,
        "o_groups": d.o_groups,
        "o_lora_rank": d.o_lora_rank,
        "q_lora_rank": d.q_lora_rank,
        "qk_rope_head_dim": d.qk_rope,
        "quantization_config": quantization_config,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 16,
            "original_max_position_embeddings": 65536,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 1.5,
        "scoring_func": "sqrtsoftplus",
        "sliding_window": 128,
        "swiglu_limit": 10.0,
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "vocab_size": d.vocab,
        "compress_rope_theta": 160000,
        "compress_ratios": compress_ratios(d),
    }
    engram = engram_layers(d)
    if engram:
        cfg["engram_layer_ids"] = engram
        cfg["engram_num_embeddings"] = [d.engram_rows] * len(engram)
        cfg["engram_head_dim"] = d.engram_dim
    return cfg


def deepseek_v4_items(d: Dims) -> Iterator[Item]:
    """The checkpoint's parameters: embed, layers, head and hc_head, then the MTP blocks."""
    h = d.hidden
    ratios = compress_ratios(d)
    engram = set(engram_layers(d))
    yield Plain("embed.weight", "BF16", (d.vocab, h))
    for layer in range(d.num_layers):
        yield from _block(d, f"layers.{layer}", layer, ratios[layer], layer < d.num_hash_layers)
        if layer in engram:
            yield Linear(
                f"layers.{layer}.engram.embed", d.engram_rows, d.engram_dim, "engram", layer
            )
    yield Plain("norm.weight", "BF16", (h,), init="norm")
    yield Linear("head", d.vocab, h, role="lm_head")
    yield from _hc_head(d, "")
    for k in range(d.mtp_layers):
        layer = d.num_layers + k
        p = f"mtp.{k}"
        yield from _block(d, p, layer, ratios[layer], hashed=False)
        yield Linear(f"{p}.e_proj", h, h, role="mtp_proj", layer=layer)
        yield Linear(f"{p}.h_proj", h, h, role="mtp_proj", layer=layer)
        yield Plain(f"{p}.enorm.weight", "BF16", (h,), init="norm")
        yield Plain(f"{p}.hnorm.weight", "BF16", (h,), init="norm")
        yield Plain(f"{p}.norm.weight", "BF16", (h,), init="norm")
        yield from _hc_head(d, f"{p}.")


def _hc_head(d: Dims, prefix: str) -> Iterator[Item]:
    yield Plain(f"{prefix}hc_head_fn", "F32", (d.hc_mult, d.hc_mult * d.hidden), init="small")
    yield Plain(f"{prefix}hc_head_base", "F32", (d.hc_mult,), init="small")
    yield Plain(f"{prefix}hc_head_scale", "F32", (1,), init="small")


def _block(d: Dims, p: str, layer: int, ratio: int, hashed: bool) -> Iterator[Item]:
    h = d.hidden
    yield from _attention(d, f"{p}.attn", layer, ratio)
    yield Plain(f"{p}.attn_norm.weight", "BF16", (h,), init="norm")
    yield Linear(f"{p}.ffn.gate", d.n_routed, h, role="router", layer=layer)
    if hashed:
        yield Plain(f"{p}.ffn.gate.tid2eid", "I64", (d.vocab, d.top_k), "index", d.n_routed)
    else:
        yield Plain(f"{p}.ffn.gate.bias", "F32", (d.n_routed,), init="bias")
    i = d.moe_intermediate
    for e in range(d.n_routed):
        yield from _ffn(f"{p}.ffn.experts.{e}", h, i, "routed", layer, e)
    if d.n_shared:
        yield from _ffn(f"{p}.ffn.shared_experts", h, d.n_shared * i, "shared", layer)
    yield Plain(f"{p}.ffn_norm.weight", "BF16", (h,), init="norm")
    mix = (2 + d.hc_mult) * d.hc_mult
    for part in ("attn", "ffn"):
        yield Plain(f"{p}.hc_{part}_fn", "F32", (mix, d.hc_mult * h), init="small")
        yield Plain(f"{p}.hc_{part}_base", "F32", (mix,), init="small")
        yield Plain(f"{p}.hc_{part}_scale", "F32", (3,), init="small")


def _attention(d: Dims, a: str, layer: int, ratio: int) -> Iterator[Item]:
    h, hd = d.hidden, d.head_dim
    yield Plain(f"{a}.attn_sink", "F32", (d.heads,), init="small")
    yield Linear(f"{a}.wq_a", d.q_lora_rank, h, role="attn", layer=layer)
    yield Plain(f"{a}.q_norm.weight", "BF16", (d.q_lora_rank,), init="norm")
    yield Linear(f"{a}.wq_b", d.heads * hd, d.q_lora_rank, role="attn", layer=layer)
    yield Linear(f"{a}.wkv", hd, h, role="attn", layer=layer)
    yield Plain(f"{a}.kv_norm.weight", "BF16", (hd,), init="norm")
    yield Linear(f"{a}.wo_a", d.o_groups * d.o_lora_rank, d.heads * hd // d.o_groups, "attn", layer)
    yield Linear(f"{a}.wo_b", h, d.o_groups * d.o_lora_rank, role="attn", layer=layer)
    if ratio:
        yield from _compressor(f"{a}.compressor", h, hd, ratio)
    if ratio == 4:
        ix = f"{a}.indexer"
        yield Linear(f"{ix}.wq_b", d.index_n_heads * d.index_head_dim, d.q_lora_rank, "attn", layer)
        yield Plain(f"{ix}.weights_proj.weight", "BF16", (d.index_n_heads, h))
        yield from _compressor(f"{ix}.compressor", h, d.index_head_dim, ratio)


def _compressor(c: str, h: int, dim: int, ratio: int) -> Iterator[Item]:
    """KV compressor: ratio 4 compresses overlapping windows (projections twice as wide)."""
    width = 2 * dim if ratio == 4 else dim
    yield Plain(f"{c}.ape", "F32", (ratio, width), init="small")
    yield Plain(f"{c}.wkv.weight", "BF16", (width, h))
    yield Plain(f"{c}.wgate.weight", "BF16", (width, h))
    yield Plain(f"{c}.norm.weight", "BF16", (dim,), init="norm")


def _ffn(m: str, h: int, inter: int, role: str, layer: int, e: int | None = None) -> Iterator[Item]:
    yield Linear(f"{m}.w1", inter, h, role, layer, "gate", e)
    yield Linear(f"{m}.w2", h, inter, role, layer, "down", e)
    yield Linear(f"{m}.w3", inter, h, role, layer, "up", e)

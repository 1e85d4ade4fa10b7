"""gpt-oss as OpenAI publishes it: config.json fields and checkpoint tensors.

Names, dtypes and shapes of openai/gpt-oss-20b / -120b (``model_type`` ``gpt_oss``; vLLM 0.33
``model_executor/models/gpt_oss.py``): every layer has GQA attention with biases
(``self_attn.{q,k,v,o}_proj.weight`` / ``.bias``) and one attention sink per head
(``self_attn.sinks`` [heads]), a router with a bias (``mlp.router.weight`` [E, H],
``mlp.router.bias`` [E]) and the routed experts as 3-D MXFP4 tensors::

    mlp.experts.gate_up_proj_blocks  U8   [E, 2I, H/32, 16]   E2M1 pairs, even element low nibble
    mlp.experts.gate_up_proj_scales  U8   [E, 2I, H/32]       E8M0, one per 32 inputs
    mlp.experts.gate_up_proj_bias    BF16 [E, 2I]
    mlp.experts.down_proj_blocks     U8   [E, H, I/32, 16]
    mlp.experts.down_proj_scales     U8   [E, H, I/32]
    mlp.experts.down_proj_bias       BF16 [E, H]

Gate and up rows interleave (``[g0, u0, g1, u1, ...]``); for random weights that changes
nothing in the bytes' distribution, so each 3-D parameter is drawn as one ``[E * R, C]``
matrix and quantized by the MXFP4 codec (``quark_mxfp4`` encoding), its bytes laid out
``[E, R, C/32, 16]``. Everything but the experts is BF16 and listed in
``modules_to_not_convert`` as OpenAI lists it.

Example::

    layout = build_gpt_oss(GPT_OSS_TINY, PresetOptions())
    layout.config["quantization_config"]["quant_method"]       # 'mxfp4'
    [t.shape for t in layout.tensors if t.name.endswith("0.mlp.experts.down_proj_blocks")]
    # [(8, 256, 3, 16)]
"""

from __future__ import annotations

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.errors import UsageError
from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.expand import expand
from checkpoint_tool.synth.layout import Item, Linear, Plain, QuantPart, SynthLayout, TensorSpec

#: openai/gpt-oss-20b config.json ``quantization_config``
GPT_OSS_QUANT_CONFIG = {
    "modules_to_not_convert": [
        "model.layers.*.self_attn",
        "model.layers.*.mlp.router",
        "model.embed_tokens",
        "lm_head",
    ],
    "quant_method": "mxfp4",
}

#: the tiny twin: I = 96 (3 scale groups) so TP 2 pads to 2 x 64 as vLLM's gpt-oss loader
#: splits it (cdiv(3, 2) = 2 groups per rank); 4 heads of 64, 2 KV heads (whole heads per
#: rank at TP 2); ~1.9 MB, so a 1.5 MB shard size reshards it
GPT_OSS_TINY = Dims(
    num_layers=2, n_routed=8, n_shared=0, top_k=2, hidden=256, moe_intermediate=96,
    vocab=512, heads=4, kv_heads=2, head_dim=64, mtp_layers=0,
)  # fmt: skip
#: openai/gpt-oss-20b (3 shards)
GPT_OSS_FULL = Dims(
    num_layers=24, n_routed=32, n_shared=0, top_k=4, hidden=2880, moe_intermediate=2880,
    vocab=201088, heads=64, kv_heads=8, head_dim=64, mtp_layers=0, shards=3,
)  # fmt: skip


def gpt_oss_config(d: Dims) -> dict:
    """config.json as openai/gpt-oss-20b publishes it, with ``d``'s sizes."""
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "experts_per_token": d.top_k,
        "head_dim": d.head_dim,
        "hidden_act": "silu",
        "hidden_size": d.hidden,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": d.moe_intermediate,
        "layer_types": [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(d.num_layers)
        ],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": d.heads,
        "num_experts_per_tok": d.top_k,
        "num_hidden_layers": d.num_layers,
        "num_key_value_heads": d.kv_heads,
        "num_local_experts": d.n_routed,
        "output_router_logits": False,
        "pad_token_id": 199999,
        "quantization_config": GPT_OSS_QUANT_CONFIG,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": d.vocab,
    }
    return dict(sorted(cfg.items()))


def gpt_oss_items(d: Dims) -> list[Item]:
    """Every tensor but the experts' MXFP4 ones, in the checkpoint's order."""
    h, hd = d.hidden, d.head_dim
    items: list[Item] = [Plain("model.embed_tokens.weight", "BF16", (d.vocab, h))]
    for layer in range(d.num_layers):
        p = f"model.layers.{layer}"
        a = f"{p}.self_attn"
        items.append(Plain(f"{p}.input_layernorm.weight", "BF16", (h,), init="norm"))
        sizes = {"q_proj": d.heads * hd, "k_proj": d.kv_heads * hd, "v_proj": d.kv_heads * hd}
        for name, rows in sizes.items():
            items.append(Linear(f"{a}.{name}", rows, h, role="attn", layer=layer))
            items.append(Plain(f"{a}.{name}.bias", "BF16", (rows,), init="small"))
        items.append(Linear(f"{a}.o_proj", h, d.heads * hd, role="attn", layer=layer))
        items.append(Plain(f"{a}.o_proj.bias", "BF16", (h,), init="small"))
        items.append(Plain(f"{a}.sinks", "BF16", (d.heads,), init="small"))
        items.append(Plain(f"{p}.post_attention_layernorm.weight", "BF16", (h,), init="norm"))
        items.append(Linear(f"{p}.mlp.router", d.n_routed, h, role="router", layer=layer))
        items.append(Plain(f"{p}.mlp.router.bias", "BF16", (d.n_routed,), init="small"))
    items.append(Plain("model.norm.weight", "BF16", (h,), init="norm"))
    items.append(Linear("lm_head", d.vocab, h, role="lm_head"))
    return items


def expert_specs(d: Dims, layer: int) -> list[TensorSpec]:
    """The six expert tensors of ``layer`` (see the module docstring)."""
    if d.hidden % 32 or d.moe_intermediate % 32:
        raise UsageError(
            f"gpt-oss: hidden {d.hidden} and intermediate {d.moe_intermediate} must be multiples "
            "of 32 (MXFP4 blocks); choose --hidden / --moe-intermediate that are"
        )
    out: list[TensorSpec] = []
    base = f"model.layers.{layer}.mlp.experts"
    for param, rows, cols in (
        ("gate_up_proj", 2 * d.moe_intermediate, d.hidden),
        ("down_proj", d.hidden, d.moe_intermediate),
    ):
        module = f"{base}.{param}"
        e = d.n_routed
        for role, suffix, shape in (
            ("weight", "blocks", (e, rows, cols // 32, 16)),
            ("scale", "scales", (e, rows, cols // 32)),
        ):
            src = QuantPart((module,), 0, role, "quark_mxfp4", (e * rows,), cols)
            out.append(
                TensorSpec(f"{module}_{suffix}", "U8", shape, src, tensor_nbytes("U8", shape))
            )
        bias = (e, rows)
        out.extend(expand([Plain(f"{module}_bias", "BF16", bias, init="small")], lambda _: "bf16"))
    return out


def build_gpt_oss(d: Dims, opts: object) -> SynthLayout:
    """The preset ``gpt-oss``: ``gpt_oss_items`` in BF16, each layer's experts after its router."""
    if d.n_shared:
        raise UsageError("gpt-oss has no shared expert: drop --shared-experts")
    tensors: list[TensorSpec] = []
    for spec in expand(gpt_oss_items(d), lambda lin: "bf16"):
        tensors.append(spec)
        if spec.name.endswith(".mlp.router.bias"):
            tensors.extend(expert_specs(d, int(spec.name.split(".")[2])))
    return SynthLayout(config=gpt_oss_config(d), tensors=tensors, default_shards=d.shards)

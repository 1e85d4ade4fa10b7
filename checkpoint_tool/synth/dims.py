"""Model dimensions of a synthetic checkpoint: tiny defaults, real full sizes, user overrides.

One ``Dims`` carries the sizes of every family (fields a family does not use are ignored).
Presets start from their family's ``tiny`` dims (or ``full`` with ``--sparse``) and apply the
user's overrides (``--layers``, ``--experts``, ``--shared-experts``, ``--hidden``,
``--moe-intermediate``).

Example::

    DEEPSEEK_V3_FULL.num_layers, DEEPSEEK_V3_FULL.n_routed   # (61, 256)  real DeepSeek-V3/R1
    with_overrides(DEEPSEEK_V3_TINY, n_routed=16).n_routed   # 16
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Dims(BaseModel):
    """Sizes of a model; names follow the config.json fields they end up in."""

    model_config = ConfigDict(frozen=True)

    num_layers: int
    n_routed: int
    n_shared: int
    top_k: int
    hidden: int
    moe_intermediate: int
    intermediate: int = 0  # dense MLP (DeepSeek first_k_dense layers)
    first_dense: int = 0
    vocab: int = 512
    heads: int = 4
    mtp_layers: int = 1
    # DeepSeek-V3 MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    # DeepSeek-V4
    head_dim: int = 0
    o_groups: int = 0
    o_lora_rank: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    hc_mult: int = 4
    num_hash_layers: int = 0
    engram_layers: tuple[int, ...] = ()
    engram_rows: int = 0
    engram_dim: int = 0
    # Qwen3.5-MoE
    kv_heads: int = 0
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    conv_kernel: int = 4
    full_attention_interval: int = 4
    #: number of shards a full-size layout is split into (None: by shard size)
    shards: int | None = None


#: user-facing option name -> Dims field
OVERRIDES = {
    "num_layers": "num_layers",
    "n_routed": "n_routed",
    "n_shared": "n_shared",
    "hidden": "hidden",
    "moe_intermediate": "moe_intermediate",
}


def with_overrides(dims: Dims, **values: int | None) -> Dims:
    """Return ``dims`` with every non-None override applied."""
    update = {OVERRIDES[k]: v for k, v in values.items() if v is not None}
    return dims.model_copy(update=update) if update else dims


# DeepSeek-V3 / R1 (config.json of deepseek-ai/DeepSeek-V3, 163 shards)
DEEPSEEK_V3_FULL = Dims(
    num_layers=61,
    first_dense=3,
    n_routed=256,
    n_shared=1,
    top_k=8,
    hidden=7168,
    moe_intermediate=2048,
    intermediate=18432,
    vocab=129280,
    heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope=128,
    qk_rope=64,
    v_head=128,
    mtp_layers=1,
    shards=163,
)
# the tiny DeepSeek-V3 architecture, with one dense and three MoE layers so per-layer
# differences show, in an MLA geometry vLLM loads and runs on CPU: q_lora_rank in whole
# 128-row blocks (block FP8 merges q_a_proj and kv_a_proj_with_mqa into fused_qkv_a_proj and
# its scale rows), kv_lora_rank 512 + qk_rope_head_dim 64 (the only latent/rope pair vLLM's CPU
# MLA kernel runs), and per-head sizes whose TP-2 slices are whole 128 blocks (q_b_proj and
# kv_b_proj rows 512, o_proj columns 256)
DEEPSEEK_V3_TINY = Dims(
    num_layers=4,
    first_dense=1,
    n_routed=8,
    n_shared=1,
    top_k=2,
    hidden=256,
    moe_intermediate=128,
    intermediate=512,
    vocab=512,
    heads=4,
    q_lora_rank=128,
    kv_lora_rank=512,
    qk_nope=64,
    qk_rope=64,
    v_head=64,
    mtp_layers=1,
)
#: the MLA sizes of the tiny DeepSeek-V3 model of the Quark producer fixtures
#: (tests/fixtures/producer-headers): hidden 256, 4 heads, q_lora 64, kv_lora 32, rope 16,
#: nope 32, v 32. vLLM cannot load it with block FP8 (q_a + kv_a scale rows 1 + 1 blocks in the
#: checkpoint, one block of 112 rows in fused_qkv_a_proj) nor run it on CPU; presets built with
#: ``mla="quark-fixture"`` reproduce the fixtures' headers.
QUARK_FIXTURE_MLA = {
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope": 32,
    "qk_rope": 16,
    "v_head": 32,
}
#: ``mla=`` choices of the DeepSeek-V3 presets
MLA_GEOMETRIES = {"vllm": {}, "quark-fixture": QUARK_FIXTURE_MLA}

# DeepSeek-V4-Flash (config.json of deepseek-ai/DeepSeek-V4-Flash, 46 shards)
DEEPSEEK_V4_FULL = Dims(
    num_layers=43,
    n_routed=256,
    n_shared=1,
    top_k=6,
    hidden=4096,
    moe_intermediate=2048,
    vocab=129280,
    heads=64,
    qk_rope=64,
    q_lora_rank=1024,
    head_dim=512,
    o_groups=8,
    o_lora_rank=1024,
    index_n_heads=64,
    index_head_dim=128,
    hc_mult=4,
    num_hash_layers=3,
    mtp_layers=1,
    shards=46,
)
DEEPSEEK_V4_TINY = Dims(
    num_layers=4,
    n_routed=8,
    n_shared=1,
    top_k=2,
    hidden=256,
    moe_intermediate=128,
    vocab=512,
    heads=4,
    qk_rope=32,
    q_lora_rank=128,
    head_dim=128,
    o_groups=2,
    o_lora_rank=128,
    index_n_heads=4,
    index_head_dim=64,
    hc_mult=4,
    num_hash_layers=1,
    engram_layers=(1,),
    engram_rows=256,
    engram_dim=128,
    mtp_layers=1,
)

# Qwen2-MoE (config.json of Qwen/Qwen1.5-MoE-A2.7B: one shared expert of 4 x 1408)
QWEN2_MOE_FULL = Dims(
    num_layers=24,
    n_routed=60,
    n_shared=4,
    top_k=4,
    hidden=2048,
    moe_intermediate=1408,
    intermediate=5632,
    vocab=151936,
    heads=16,
    kv_heads=16,
    head_dim=128,
    mtp_layers=0,
    shards=8,
)
# Qwen3-MoE (config.json of Qwen/Qwen3-30B-A3B: no shared expert)
QWEN3_MOE_FULL = Dims(
    num_layers=48,
    n_routed=128,
    n_shared=0,
    top_k=8,
    hidden=2048,
    moe_intermediate=768,
    intermediate=6144,
    vocab=151936,
    heads=32,
    kv_heads=4,
    head_dim=128,
    mtp_layers=0,
    shards=16,
)
# tiny Qwen2-/Qwen3-MoE: 3 MoE layers, GQA 4/2 heads of 64 (whole heads per rank at TP 2)
QWEN_MOE_TINY = Dims(
    num_layers=3,
    n_routed=8,
    n_shared=1,
    top_k=2,
    hidden=256,
    moe_intermediate=128,
    intermediate=512,
    vocab=512,
    heads=4,
    kv_heads=2,
    head_dim=64,
    mtp_layers=0,
)

# Qwen3.5-MoE (text model of Qwen3.5-397B-A17B)
QWEN3_5_MOE_FULL = Dims(
    num_layers=60,
    n_routed=512,
    n_shared=1,
    top_k=10,
    hidden=4096,
    moe_intermediate=1024,
    vocab=248320,
    heads=32,
    kv_heads=2,
    head_dim=256,
    linear_k_heads=16,
    linear_v_heads=64,
    linear_k_dim=128,
    linear_v_dim=128,
    full_attention_interval=4,
    mtp_layers=0,
    shards=94,
)
QWEN3_5_MOE_TINY = Dims(
    num_layers=4,
    n_routed=8,
    n_shared=1,
    top_k=2,
    hidden=256,
    moe_intermediate=128,
    vocab=512,
    heads=4,
    kv_heads=2,
    head_dim=64,
    linear_k_heads=2,
    linear_v_heads=4,
    linear_k_dim=32,
    linear_v_dim=32,
    full_attention_interval=4,
    mtp_layers=0,
)

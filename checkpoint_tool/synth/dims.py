"""Model dimensions of a synthetic checkpoint: tiny defaults, real full sizes, user overrides.

One ``Dims`` carries the sizes of every family (fields a family does not use are ignored).
Presets start from their family's ``tiny`` dims (or ``full`` with ``--sparse``) and apply the
user's overrides (``--layers``, ``--experts``, ``--shared-experts``, ``--hidden``,
``--moe-intermediate``). The sizes of every model are one table, ``_TABLE``.

Example::

    DEEPSEEK_V3_FULL.num_layers, DEEPSEEK_V3_FULL.n_routed   # (61, 256)  real DeepSeek-V3/R1
    with_overrides(DEEPSEEK_V3_TINY, n_routed=16).n_routed   # 16
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from checkpoint_tool.errors import UsageError


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


#: user-overridable ``Dims`` field -> (``ckpt synth`` option, smallest value it takes)
OVERRIDES: dict[str, tuple[str, int]] = {
    "num_layers": ("--layers", 1),
    "n_routed": ("--experts", 1),
    "n_shared": ("--shared-experts", 0),
    "hidden": ("--hidden", 32),
    "moe_intermediate": ("--moe-intermediate", 1),
}


def with_overrides(dims: Dims, **values: int | None) -> Dims:
    """Return ``dims`` with every non-None override applied (``UsageError`` below its minimum).

    ``with_overrides(QWEN_MOE_TINY, n_routed=4, hidden=None).n_routed`` -> ``4``.
    """
    unknown = sorted(set(values) - set(OVERRIDES))
    if unknown:
        raise TypeError(f"with_overrides: no size override named {', '.join(unknown)}")
    for name, (label, low) in OVERRIDES.items():
        value = values.get(name)
        if value is not None and value < low:
            raise UsageError(f"{label} {value}: must be at least {low}")
    update = {k: v for k, v in values.items() if v is not None}
    return dims.model_copy(update=update) if update else dims


# One column per model, one row per field it sets ("." keeps the Dims default, "1," is the
# tuple (1,)):
# - v3: DeepSeek-V3 / R1 (config.json of deepseek-ai/DeepSeek-V3, 163 shards);
# - v3-tiny: one dense and three MoE layers so per-layer differences show, in an MLA geometry
#   vLLM loads and runs on CPU: q_lora_rank in whole 128-row blocks (block FP8 merges q_a_proj
#   and kv_a_proj_with_mqa into fused_qkv_a_proj and its scale rows), kv_lora_rank 512 +
#   qk_rope_head_dim 64 (the only latent/rope pair vLLM's CPU MLA kernel runs), and per-head
#   sizes whose TP-2 slices are whole 128 blocks (q_b_proj and kv_b_proj rows 512, o_proj
#   columns 256);
# - v4 / v4-tiny: DeepSeek-V4-Flash (config.json of deepseek-ai/DeepSeek-V4-Flash, 46 shards)
#   and its tiny twin, with a DeepSeek-V4.1 engram table on layer 1 (``engram=False`` drops
#   it); the tiny indexer keeps V4-Flash's head dim 128 (vLLM's fused quant+cache kernel takes
#   128 or 512 only: models/deepseek_v4/compressor.py);
# - qwen2: Qwen2-MoE (config.json of Qwen/Qwen1.5-MoE-A2.7B: one shared expert of 4 x 1408);
#   qwen3: Qwen3-MoE (config.json of Qwen/Qwen3-30B-A3B: no shared expert);
# - qwen-tiny: tiny Qwen2-/Qwen3-MoE, 3 MoE layers, GQA 4/2 heads of 64 (whole heads per rank
#   at TP 2);
# - qwen3.5 / qwen3.5-tiny: Qwen3.5-MoE (text model of Qwen3.5-397B-A17B) and its tiny twin;
# - moe1k / moe1k-tiny: a DeepSeek-V3-architecture scale model of 1024 routed experts x 80 layers
#   (one dense layer first, as Kimi-K2; V3's MLA and hidden size, fine-grained experts of 1024,
#   no MTP layer as Quark's in-memory exports; ~0.93 TB of MXFP4 in 192 shards, ~486k tensors)
#   and a tiny twin of 32 experts in the v3-tiny geometry.
_TABLE = """
field                    v3     v3-tiny v4     v4-tiny qwen2  qwen3  qwen-tiny qwen3.5 qwen3.5-tiny moe1k  moe1k-tiny
num_layers               61     4       43     4       24     48     3         60      4            80     4
n_routed                 256    8       256    8       60     128    8         512     8            1024   32
n_shared                 1      1       1      1       4      0      1         1       1            1      1
top_k                    8      2       6      2       4      8      2         10      2            8      2
hidden                   7168   256     4096   256     2048   2048   256       4096    256          7168   256
moe_intermediate         2048   128     2048   128     1408   768    128       1024    128          1024   128
intermediate             18432  512     .      .       5632   6144   512       .       .            18432  512
first_dense              3      1       .      .       .      .      .         .       .            1      1
vocab                    129280 512     129280 512     151936 151936 512       248320  512          163840 512
heads                    128    4       64     4       16     32     4         32      4            128    4
mtp_layers               1      1       1      1       0      0      0         0       0            0      0
q_lora_rank              1536   128     1024   128     .      .      .         .       .            1536   128
kv_lora_rank             512    512     .      .       .      .      .         .       .            512    512
qk_nope                  128    64      .      .       .      .      .         .       .            128    64
qk_rope                  64     64      64     32      .      .      .         .       .            64     64
v_head                   128    64      .      .       .      .      .         .       .            128    64
head_dim                 .      .       512    128     128    128    64        256     64           .      .
o_groups                 .      .       8      2       .      .      .         .       .            .      .
o_lora_rank              .      .       1024   128     .      .      .         .       .            .      .
index_n_heads            .      .       64     4       .      .      .         .       .            .      .
index_head_dim           .      .       128    128     .      .      .         .       .            .      .
hc_mult                  .      .       4      4       .      .      .         .       .            .      .
num_hash_layers          .      .       3      1       .      .      .         .       .            .      .
engram_layers            .      .       .      1,      .      .      .         .       .            .      .
engram_rows              .      .       .      256     .      .      .         .       .            .      .
engram_dim               .      .       .      128     .      .      .         .       .            .      .
kv_heads                 .      .       .      .       16     4      2         2       2            .      .
linear_k_heads           .      .       .      .       .      .      .         16      2            .      .
linear_v_heads           .      .       .      .       .      .      .         64      4            .      .
linear_k_dim             .      .       .      .       .      .      .         128     32           .      .
linear_v_dim             .      .       .      .       .      .      .         128     32           .      .
full_attention_interval  .      .       .      .       .      .      .         4       4            .      .
shards                   163    .       46     .       8      16     .         94      .            192    .
"""


def parse_table(table: str) -> dict[str, Dims]:
    """Column name -> ``Dims`` of a whitespace table like ``_TABLE``.

    ``parse_table("field A B\\nnum_layers 2 3\\n...")["B"].num_layers`` -> ``3``.
    """
    header, *rows = (line.split() for line in table.strip().splitlines())
    columns = header[1:]
    fields: dict[str, dict[str, int | tuple[int, ...]]] = {c: {} for c in columns}
    for name, *cells in rows:
        if len(cells) != len(columns):
            raise ValueError(f"dims table row {name!r}: {len(cells)} cells, {len(columns)} columns")
        for column, cell in zip(columns, cells, strict=True):
            if cell == ".":
                continue
            value = tuple(int(v) for v in cell.split(",") if v) if "," in cell else int(cell)
            fields[column][name] = value
    return {c: Dims(**f) for c, f in fields.items()}


_DIMS = parse_table(_TABLE)
DEEPSEEK_V3_FULL = _DIMS["v3"]
DEEPSEEK_V3_TINY = _DIMS["v3-tiny"]
DEEPSEEK_V4_FULL = _DIMS["v4"]
DEEPSEEK_V4_TINY = _DIMS["v4-tiny"]
QWEN2_MOE_FULL = _DIMS["qwen2"]
QWEN3_MOE_FULL = _DIMS["qwen3"]
QWEN_MOE_TINY = _DIMS["qwen-tiny"]
QWEN3_5_MOE_FULL = _DIMS["qwen3.5"]
QWEN3_5_MOE_TINY = _DIMS["qwen3.5-tiny"]
MOE_1024X80_FULL = _DIMS["moe1k"]
MOE_1024X80_TINY = _DIMS["moe1k-tiny"]

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

"""Module-name facts every config shares: packed (fused) layers, MoE experts, non-linear modules.

vLLM loads several checkpoint modules into one fused layer (``gate_proj`` + ``up_proj`` ->
``gate_up_proj``) and all routed experts of a layer into one ``FusedMoE`` layer
(``model.layers.3.mlp.experts``). Name matching in vLLM runs on those *vLLM* layer names,
which is why it can differ from the producer's per-module matching.

Example::

    expert_parts("model.layers.3.mlp.experts.7.down_proj")
    # ('model.layers.3.mlp.experts', 7, 'down_proj')
    packed_siblings("model.layers.0.self_attn.q_a_proj")
    # ('fused_qkv_a_proj', ['model.layers.0.self_attn.q_a_proj',
    #                       'model.layers.0.self_attn.kv_a_proj_with_mqa'])
"""

from __future__ import annotations

#: vLLM's packed_modules_mapping across the families we know: fused layer -> checkpoint shards
PACKED_MODULES: dict[str, tuple[str, ...]] = {
    "gate_up_proj": ("gate_proj", "up_proj"),
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
}

#: DeepSeek-V4 packs by parent module: ``attn.{wq_a,wkv}``, ``compressor.{wkv,wgate}``,
#: non-routed ``{w1,w3}`` (shared experts / dense MLP)
_DSV4_PACKED: list[tuple[str, str, tuple[str, ...]]] = [
    ("attn", "fused_wqa_wkv", ("wq_a", "wkv")),
    ("compressor", "fused_wkv_wgate", ("wkv", "wgate")),
]

#: every last name component that can be a packed shard (a cheap first test)
PACKED_SHARD_NAMES = frozenset(
    {"w1", "w3"}
    | {s for _, _, shards in _DSV4_PACKED for s in shards}
    | {s for shards in PACKED_MODULES.values() for s in shards}
)

#: last name components of modules that are never quantized linears
_NON_LINEAR_LAST = {
    "embed_tokens": "embedding",
    "embed": "embedding",
    "wte": "embedding",
    "word_embeddings": "embedding",
    "enorm": "norm",
    "hnorm": "norm",
    "eh_proj": "MTP projection (vLLM builds it as a plain nn.Linear)",
    "weights_proj": "indexer weights_proj (created without a quant config)",
    "router": "router",
    "conv1d": "convolution (gated delta-net conv1d)",
    "shared_expert_gate": "shared-expert gate (vLLM builds it without a quant config)",
}


#: gpt-oss's 3-D expert parameters (``X.experts.gate_up_proj``) and the suffixes of their
#: stored tensors, joined with ``_``: ``X.experts.gate_up_proj_blocks`` -> its role
GPT_OSS_PARAMS = ("gate_up_proj", "down_proj")
GPT_OSS_SUFFIXES = {"blocks": "weight", "scales": "scale", "bias": "bias"}


def split_tensor_name(name: str) -> tuple[str, str]:
    """Module and parameter suffix of a tensor name.

    ``"model.layers.3.mlp.experts.0.gate_proj.weight_scale_inv"`` ->
    ``("model.layers.3.mlp.experts.0.gate_proj", "weight_scale_inv")``; a name without a dot
    is its own suffix with an empty module. gpt-oss's expert tensors split at their ``_``:
    ``"model.layers.0.mlp.experts.down_proj_scales"`` ->
    ``("model.layers.0.mlp.experts.down_proj", "scales")``.
    """
    module, _, suffix = name.rpartition(".")
    if module.endswith(".experts") and "_" in suffix:
        param, _, kind = suffix.rpartition("_")
        if param in GPT_OSS_PARAMS and kind in GPT_OSS_SUFFIXES:
            return f"{module}.{param}", kind
    return module, suffix


def split_gpt_oss_name(name: str) -> tuple[str, str] | None:
    """``(module, role)`` of a gpt-oss expert tensor, else None.

    ``"model.layers.0.mlp.experts.down_proj_scales"`` ->
    ``("model.layers.0.mlp.experts.down_proj", "scale")``.
    """
    module, suffix = split_tensor_name(name)
    if suffix in GPT_OSS_SUFFIXES and module.rpartition(".")[2] in GPT_OSS_PARAMS:
        return module, GPT_OSS_SUFFIXES[suffix]
    return None


def tensor_name(module: str, suffix: str) -> str:
    """The name of ``module``'s ``suffix`` tensor: ``{module}.{suffix}``, gpt-oss's expert
    parameters ``{module}_{suffix}`` (``X.experts.gate_up_proj`` + ``scales``)."""
    head, _, leaf = module.rpartition(".")
    if suffix in GPT_OSS_SUFFIXES and leaf in GPT_OSS_PARAMS and head.endswith(".experts"):
        return f"{module}_{suffix}"
    return f"{module}.{suffix}"


def expert_parts(module: str) -> tuple[str, int, str] | None:
    r"""``(fused MoE prefix, expert index, projection)`` for a routed expert module, else None.

    The regex ``^(.*\.experts)\.(\d+)\.([A-Za-z0-9_]+)$`` (the last ``.experts.``), checked
    with string methods: it runs for every module of a checkpoint (~46k for R1).
    """
    split = _expert_split(module)
    return None if split is None else (split[0], int(split[1]), split[2])


def expert_key(module: str) -> tuple[str, str] | None:
    """``(fused MoE prefix, projection)`` of a routed expert module (``expert_parts`` without
    the index, which the resolver's per-module loop does not need), else None."""
    split = _expert_split(module)
    return None if split is None else (split[0], split[2])


def _expert_split(module: str) -> tuple[str, str, str] | None:
    """``PREFIX.experts`` / ``INDEX`` / ``PROJ`` of ``PREFIX.experts.INDEX.PROJ``, as strings."""
    head, _, proj = module.rpartition(".")
    prefix, _, index = head.rpartition(".")
    if prefix.endswith(".experts") and index.isdecimal() and _is_word(proj):
        return prefix, index, proj
    return None


def _is_word(s: str) -> bool:
    """``[A-Za-z0-9_]+``"""
    return s.isascii() and s.replace("_", "a").isalnum()


def packed_siblings(module: str) -> tuple[str, list[str]] | None:
    """The fused vLLM layer a checkpoint module is a shard of, and all its shard modules.

    Routed experts are not packed shards (they go to FusedMoE). Returns None when the module
    is loaded on its own.
    """
    parent, dot, last = module.rpartition(".")
    if not dot or last not in PACKED_SHARD_NAMES or expert_parts(module) is not None:
        return None
    parent_last = parent.rpartition(".")[2]
    for owner, fused, shards in _DSV4_PACKED:
        if parent_last == owner and last in shards:
            return fused, [f"{parent}.{s}" for s in shards]
    if last in ("w1", "w3"):
        return "gate_up_proj", [f"{parent}.w1", f"{parent}.w3"]
    for fused, shards in PACKED_MODULES.items():
        if last in shards:
            return fused, [f"{parent}.{s}" for s in shards]
    return None


def non_linear_reason(module: str) -> str | None:
    """Why a module holding a ``.weight`` is not a quantizable linear (None if it is one).

    Norms, embeddings, MoE routers (``mlp.gate`` / ``ffn.gate``), MTP ``eh_proj``/``shared_head``
    and DeepSeek indexer ``weights_proj`` are created without a quant method by vLLM and are
    never quantized by the producers.
    """
    if not module:
        return "top-level parameter"
    parts = module.split(".")
    last = parts[-1]
    if last in _NON_LINEAR_LAST:
        return _NON_LINEAR_LAST[last]
    if "norm" in last:
        return "norm"
    if last == "gate" and len(parts) >= 2 and parts[-2] in ("mlp", "ffn", "block_sparse_moe"):
        return "MoE router"
    if "shared_head" in parts and last in ("head", "norm"):
        return "MTP shared head (ParallelLMHead)"
    return None

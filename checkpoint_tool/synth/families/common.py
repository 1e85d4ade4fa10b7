"""Parameters and config fields several families write alike.

``gated_mlp``: the Hugging Face ``gate_proj``/``up_proj``/``down_proj`` MLP (DeepSeek-V3 and
Qwen experts, shared experts, dense MLPs); ``qwen_moe_block``: a Qwen MoE ``mlp`` (Qwen2-MoE,
Qwen3-MoE, Qwen3.5-MoE); ``deepseek_moe_fields``: the MoE sizes DeepSeek-V3 and V4 write in
config.json under the same keys.

Example::

    [lin.module for lin in gated_mlp("model.layers.0.mlp", 256, 512, "dense_mlp", 0)]
    # ['model.layers.0.mlp.gate_proj', 'model.layers.0.mlp.up_proj', 'model.layers.0.mlp.down_proj']
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoint_tool.synth.dims import Dims
from checkpoint_tool.synth.layout import Item, Linear


def gated_mlp(
    m: str, h: int, inter: int, role: str, layer: int, expert: int | None = None
) -> Iterator[Item]:
    """``{m}.gate_proj`` / ``up_proj`` ``[inter, h]`` and ``down_proj`` ``[h, inter]``."""
    yield Linear(f"{m}.gate_proj", inter, h, role, layer, "gate", expert)
    yield Linear(f"{m}.up_proj", inter, h, role, layer, "up", expert)
    yield Linear(f"{m}.down_proj", h, inter, role, layer, "down", expert)


def shared_intermediate(d: Dims) -> int:
    """Width of Qwen's one shared expert: ``--shared-experts N`` makes it N x moe_intermediate."""
    return d.n_shared * d.moe_intermediate


def qwen_moe_block(d: Dims, m: str, layer: int, *, shared: bool) -> Iterator[Item]:
    """A Qwen MoE ``mlp``: router ``{m}.gate`` [E, H], routed ``{m}.experts.E``, and with
    ``shared`` one ``{m}.shared_expert`` MLP and its sigmoid ``{m}.shared_expert_gate`` [1, H]."""
    h, i = d.hidden, d.moe_intermediate
    yield Linear(f"{m}.gate", d.n_routed, h, role="router", layer=layer)
    for e in range(d.n_routed):
        yield from gated_mlp(f"{m}.experts.{e}", h, i, "routed", layer, e)
    if shared:
        yield from gated_mlp(f"{m}.shared_expert", h, shared_intermediate(d), "shared", layer)
        yield Linear(f"{m}.shared_expert_gate", 1, h, role="router_aux", layer=layer)


def deepseek_moe_fields(d: Dims) -> dict:
    """config.json MoE sizes DeepSeek-V3 and V4 spell alike, in sorted key order, e.g.
    ``{"n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, ...}``."""
    return {
        "n_routed_experts": d.n_routed,
        "n_shared_experts": d.n_shared,
        "norm_topk_prob": True,
        "num_attention_heads": d.heads,
        "num_experts_per_tok": d.top_k,
        "num_hidden_layers": d.num_layers,
    }

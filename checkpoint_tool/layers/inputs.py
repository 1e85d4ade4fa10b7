"""Seeded inputs for running a checkpoint's MoE layer, and their routing.

Both ``verify``'s numeric check and the requantization error estimate (``requant.error``) feed a
layer the same activations, so their figures agree for the same seed:

- ``hidden_states``: float32 ``[tokens, H]`` standard normal, distinct per layer;
- ``input_ids``: token ids for a hash-routed layer (DeepSeek-V4 ``tid2eid``), else None;
- ``route_tokens``: top-k expert ids and weights through a ``Router`` (weight, bias, table);
- ``remap_experts``: model expert ids -> indexes into a loaded (restricted) expert list.

Example::

    x = hidden_states(16, 7168, seed=0, layer=3)                  # float32 [16, 7168]
    ids, w = route_tokens(x, view.router(3), view.routing(), None)  # [16, 8] int64, float32
    loaded = view.layer(3, experts=sorted(set(ids.flatten().tolist())))
    remap_experts(ids, loaded.slot_of)                             # indexes into loaded experts
"""

from __future__ import annotations

import torch

from checkpoint_tool.layers.view import Router
from checkpoint_tool.runtime.routing import RoutingConfig, route


def hidden_states(tokens: int, hidden: int, seed: int, layer: int) -> torch.Tensor:
    """Seeded float32 ``[tokens, hidden]`` standard normal inputs, distinct per layer."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + layer)
    return torch.randn(tokens, hidden, generator=gen)


def input_ids(tokens: int, router: Router, seed: int, layer: int) -> torch.Tensor | None:
    """Seeded token ids ``[tokens]`` for a hash-routed layer (uniform over its table's rows)."""
    if router.hash_table is None:
        return None
    gen = torch.Generator().manual_seed(seed * 1_000_003 + layer + 7)
    return torch.randint(0, router.hash_table.shape[0], (tokens,), generator=gen)


def route_tokens(
    x: torch.Tensor, router: Router, routing: RoutingConfig, tokens: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk ids [T, k], topk weights [T, k])`` of ``x`` through ``router``."""
    return route(
        x, router.weight, routing, router.bias, input_ids=tokens, hash_table=router.hash_table
    )


def remap_experts(ids: torch.Tensor, slot_of: dict[int, int]) -> torch.Tensor:
    """Model expert ids -> indexes into the loaded (restricted) expert list."""
    lut = torch.full((max(slot_of) + 1,), -1, dtype=torch.long)
    for e, i in slot_of.items():
        lut[e] = i
    return lut[ids]

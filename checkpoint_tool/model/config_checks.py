"""Range checks of config.json's model sizes, run once before any fact or plan is built.

config.json is input: a count that is 0, negative, a bool, or absurdly large would otherwise
reach the planner (``num_hidden_layers`` 10^9 built a list until ``MemoryError``; a negative
expert count crashed numpy; ``num_experts_per_tok`` 0 wrote an output no engine runs). Each
field is read by the one config accessor (``config_field``: a multimodal wrapper's
``text_config`` first) and, when present (None counts as absent), must be:

- ``POSITIVE``: an integer >= 1 (layers, hidden size, heads, expert counts and widths, top-k);
- ``NON_NEGATIVE``: an integer >= 0 (shared experts, MTP layers, leading dense layers);
- at most its ``UPPER`` bound, far above every published model (DeepSeek-R1: 61 layers, 256
  experts, hidden 7168, intermediate 18432; Qwen3-Next: 512 experts; the 1024-expert scale
  preset) and low enough that the per-layer and per-expert tables stay small;
- ``num_experts_per_tok`` at most the routed expert count;
- ``PER_LAYER`` fields may instead be a non-empty list of such integers, one per layer:
  vLLM's Transformers backend picks ``moe_intermediate_size[layer_idx]`` from a list
  (``model_executor/models/transformers/moe.py`` ``recursive_replace``:
  ``maybe_per_layer(intermediate_size, layer_idx)``), as Hunyuan-A13B's config.json spells it;
- ``POSITIVE_FLOATS`` (``rms_norm_eps``, ``routed_scaling_factor``): a finite number > 0
  (NaN and infinity never get here: ``catalog.json_input`` refuses them as not JSON).

Every fault is one ``InputError`` line naming the field, the value and what to do.

Example::

    check_config({"num_hidden_layers": 61, "n_routed_experts": 256, "num_experts_per_tok": 8})
    check_config({"n_routed_experts": 8, "num_experts_per_tok": 64})
    # InputError: config.json: num_experts_per_tok 64 exceeds the routed experts (8); ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.model.config_fields import config_field

MAX_LAYERS = 1024
MAX_EXPERTS = 16384
MAX_WIDTH = 1 << 20

#: the routed expert count, as each family spells it
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")

POSITIVE: dict[str, int] = {
    "num_hidden_layers": MAX_LAYERS,
    "hidden_size": MAX_WIDTH,
    "num_attention_heads": MAX_WIDTH,
    "moe_intermediate_size": MAX_WIDTH,
    "intermediate_size": MAX_WIDTH,
    **dict.fromkeys(EXPERT_KEYS, MAX_EXPERTS),
    "num_experts_per_tok": MAX_EXPERTS,
}
NON_NEGATIVE: dict[str, int] = {
    "n_shared_experts": MAX_EXPERTS,
    "num_nextn_predict_layers": MAX_LAYERS,
    "first_k_dense_replace": MAX_LAYERS,
    "shared_expert_intermediate_size": MAX_WIDTH,
}
POSITIVE_FLOATS = ("rms_norm_eps", "routed_scaling_factor")
#: fields vLLM also reads as a list per layer (each entry checked as the scalar would be)
PER_LAYER = frozenset({"moe_intermediate_size"})


def _fail(key: str, value: Any, why: str) -> InputError:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return InputError(
        f"config.json: {key} {shown} {why}; fix config.json or restore it from the model's release"
    )


def _int(config: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = config_field(config, key)
    if value is None:
        return None
    if key in PER_LAYER and isinstance(value, list):
        if not value:
            raise _fail(key, value, "is an empty list")
        for entry in value:
            _in_range(key, entry, low, high)
        return None
    return _in_range(key, value, low, high)


def _in_range(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, value, "is not an integer")
    if value < low:
        raise _fail(key, value, "must be positive" if low else "must not be negative")
    if value > high:
        raise _fail(key, value, f"is over ckpt's bound of {high} (no published model is near)")
    return value


def check_config(config: Mapping[str, Any] | None) -> None:
    """Refuse a config.json whose model sizes are out of range (see the module doc)."""
    if not config:
        return
    for key, high in POSITIVE.items():
        _int(config, key, 1, high)
    for key, high in NON_NEGATIVE.items():
        _int(config, key, 0, high)
    top_k = config_field(config, "num_experts_per_tok")
    for key in EXPERT_KEYS:
        experts = config_field(config, key)
        if experts is not None and top_k is not None and top_k > experts:
            raise _fail(
                "num_experts_per_tok", top_k, f"exceeds the routed experts ({key} {experts})"
            )
    for key in POSITIVE_FLOATS:
        value = config_field(config, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(key, value, "is not a number")
        if not math.isfinite(value) or value <= 0:
            raise _fail(key, value, "must be a finite number > 0")

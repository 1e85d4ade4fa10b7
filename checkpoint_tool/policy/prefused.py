"""Shared experts a previous ``ckpt convert`` already wrote as routed slots, read back.

``ckpt convert`` records the slots it made in config.json's ``ckpt`` key
(``plan.build._metadata``): ``{"fse_slots": {"1": [8], "2": [8]}}`` -- MoE layer -> the routed
indices ``n_routed + j`` that hold shared expert ``j``. Every reader (inspect, plan, convert,
validate, the engine rules) reads them here, so its own output's redirected slots are not
reported as stray experts and missing shared experts.

Example::

    prefused_slots({"ckpt": {"fse_slots": {"1": [8], "2": [8]}}})
    # {1: [8], 2: [8]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def prefused_slots(config: Mapping[str, Any] | None) -> dict[int, list[int]]:
    """MoE layer -> routed slots holding its shared experts (empty: none recorded)."""
    meta = (config or {}).get("ckpt")
    slots = meta.get("fse_slots") if isinstance(meta, Mapping) else None
    if not isinstance(slots, Mapping):
        return {}
    out: dict[int, list[int]] = {}
    for key, value in slots.items():
        if str(key).isdigit() and isinstance(value, list) and value:
            if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                out[int(key)] = sorted(value)
    return out

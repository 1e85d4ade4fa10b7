"""Option value types shared by several commands (typer validates them; bad values exit 2).

Example: ``ckpt plan SRC --fse off --layout vllm-sharded`` and ``ckpt convert`` take the same
``FseOption`` / ``LayoutOption`` values as ``PlanOptions.fse`` / ``PlanOptions.layout``.
"""

from __future__ import annotations

from enum import Enum


class FseOption(str, Enum):
    """Fused shared experts: the policy decides per layer (auto), or force on / off."""

    auto = "auto"
    on = "on"
    off = "off"


class LayoutOption(str, Enum):
    """Output layout: HF-style shards + index, or vLLM per-rank sharded state."""

    hf = "hf"
    vllm_sharded = "vllm-sharded"

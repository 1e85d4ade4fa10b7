"""One builder per model family; ``family_of(config)`` picks it from model_type/architectures."""

from __future__ import annotations

from typing import Any

from checkpoint_tool.model.families import deepseek_v3, deepseek_v4, glm4_moe, qwen3_moe

#: family name -> builder module, in the order families are tried
FAMILIES = {
    "deepseek_v4": deepseek_v4,
    "deepseek_v3": deepseek_v3,
    "qwen3_moe": qwen3_moe,
    "glm4_moe": glm4_moe,
}


def family_of(config: dict[str, Any] | None) -> str:
    """``deepseek_v3`` | ``deepseek_v4`` | ``qwen3_moe`` | ``glm4_moe`` | ``generic``.

    ``model_type`` decides (also ``text_config.model_type``); then the architecture name.
    """
    if not config:
        return "generic"
    types = {config.get("model_type")}
    inner = config.get("text_config")
    if isinstance(inner, dict):
        types.add(inner.get("model_type"))
    for name, module in FAMILIES.items():
        if types & module.MODEL_TYPES:
            return name
    archs = config.get("architectures") or []
    for name, module in FAMILIES.items():
        if any(isinstance(a, str) and a.startswith(module.ARCHITECTURE_PREFIXES) for a in archs):
            return name
    return "generic"

"""One builder per model family; ``family_of(config)`` picks it from model_type/architectures."""

from __future__ import annotations

from typing import Any

from checkpoint_tool.model.config_fields import config_parts
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

    ``model_type`` decides, of any part of config.json (a multimodal wrapper's own, e.g.
    ``qwen3_5_moe``, or its ``text_config``'s, ``qwen3_5_moe_text``); then the architecture
    name, read at the top level only, where transformers and vLLM keep it
    (``get_architectures`` reads ``hf_config``, not ``hf_text_config``).
    """
    if not config:
        return "generic"
    types = {doc.get("model_type") for doc in config_parts(config)}
    for name, module in FAMILIES.items():
        if types & module.MODEL_TYPES:
            return name
    archs = config.get("architectures") or []
    for name, module in FAMILIES.items():
        if any(isinstance(a, str) and a.startswith(module.ARCHITECTURE_PREFIXES) for a in archs):
            return name
    return "generic"

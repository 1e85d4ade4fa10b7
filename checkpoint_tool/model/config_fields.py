"""Typed reads of config.json fields with one-line errors that say what is missing.

Example::

    cfg = ConfigView({"hidden_size": 7168, "n_shared_experts": None}, family="deepseek_v3")
    cfg.req_int("hidden_size")          # 7168
    cfg.opt_int("n_shared_experts", 0)  # 0   (None counts as absent)
    cfg.req_int("moe_intermediate_size")
    # InputError: config.json: deepseek_v3 model needs an integer 'moe_intermediate_size'; ...
    ConfigView({"num_local_experts": 128}, family="qwen3_moe").req_int("num_experts")
    # 128: transformers' attribute_map alias (Qwen3MoeConfig as transformers 5 saves it)
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.errors import InputError


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config: ``text_config`` for multimodal wrappers
    (Qwen3.5-MoE), the config itself otherwise."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and "num_hidden_layers" in inner:
        return inner
    return config


#: transformers ``attribute_map`` aliases: the field a family reads -> the names a saved
#: config.json may spell it with (transformers 5's Qwen3MoeConfig maps ``num_experts`` to
#: ``num_local_experts`` and saves the latter; vLLM reads the config through transformers,
#: so both spellings load)
ALIASES: dict[str, tuple[str, ...]] = {"num_experts": ("num_local_experts",)}


class ConfigView:
    """Read fields of one (text) config dict, naming the family in errors; a field absent
    under its own name is read from its ``ALIASES`` spelling."""

    def __init__(self, config: dict[str, Any], *, family: str) -> None:
        self.config = config
        self.family = family

    def _raw(self, key: str) -> Any:
        value = self.config.get(key)
        for alias in ALIASES.get(key, ()):
            if value is not None:
                break
            value = self.config.get(alias)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._raw(key)
        return default if value is None else value

    def req_int(self, key: str) -> int:
        value = self._raw(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"config.json: {self.family} model needs an integer {key!r} (got {value!r}); "
                "fix config.json or restore it from the model's release"
            )
        return value

    def opt_int(self, key: str, default: int) -> int:
        value = self._raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"config.json: {key!r} must be an integer, got {value!r}; fix config.json"
            )
        return value

    def int_list(self, key: str) -> list[int]:
        value = self._raw(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise InputError(f"config.json: {key!r} must be a list of layer indices, got {value!r}")
        return list(value)

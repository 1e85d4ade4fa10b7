"""Where a config.json field lives, and typed reads of it with one-line errors.

One rule, used by the model facts, the recipes, the target specs and the config edits: **the
language-model config wins**. A multimodal wrapper (Qwen3.5-MoE) keeps its language model's
fields in ``text_config``; a field is read there first and from the wrapper's top level only
when the language-model config does not have it. A plain config is read as it is.

Why: vLLM 0.33 builds the model from the language-model config. ``ModelConfig.hf_text_config
= get_hf_text_config(hf_config)`` (``vllm/transformers_utils/config.py``: transformers'
``PretrainedConfig.get_text_config()``, i.e. ``text_config`` for a multimodal config, the
config itself otherwise); the sizes come from it (``ModelArchConfigConvertorBase.
get_hidden_size`` / ``get_num_hidden_layers`` / ``get_num_experts`` in
``vllm/transformers_utils/model_arch_config_convertor.py`` read ``self.hf_text_config``) and so
do the model classes (``Qwen3_5MoeForConditionalGeneration`` -> ``Qwen3NextDecoderLayer``:
``config = vllm_config.model_config.hf_text_config``, ``vllm/model_executor/models/
qwen3_5.py``). Where vLLM falls back to the wrapper it does so after the text config
(``mrope_num_dims``: ``for candidate in (config.get_text_config(), config)``).

What describes the checkpoint as a whole stays at the top level and is read there explicitly
by its callers, not through this module: ``architectures`` (``get_architectures`` reads
``self.hf_config``), ``quantization_config`` (``get_quantization_config``: the top level, the
text config only when the top has none) and the checkpoint's own ``model_type``.

``text_config`` counts as the language-model config when it has ``num_hidden_layers`` (vLLM's
``get_hf_text_config`` likewise insists on a real model config: ``num_attention_heads``);
any other ``text_config`` is read last, after the top level.

Example::

    wrapper = {"model_type": "qwen3_5_moe", "moe_intermediate_size": 1,
               "quantization_config": {"quant_method": "quark"},
               "text_config": {"num_hidden_layers": 40, "moe_intermediate_size": 512,
                               "num_local_experts": 256}}
    config_field(wrapper, "moe_intermediate_size")            # 512 (text_config wins)
    config_field(wrapper, "num_experts")                      # 256 (transformers 5 alias)
    config_field(wrapper, "quantization_config.quant_method") # "quark" (only at the top)
    cfg = ConfigView({"hidden_size": 7168, "n_shared_experts": None}, family="deepseek_v3")
    cfg.req_int("hidden_size")          # 7168
    cfg.opt_int("n_shared_experts", 0)  # 0   (None counts as absent)
    cfg.req_int("moe_intermediate_size")
    # InputError: config.json: deepseek_v3 model needs an integer 'moe_intermediate_size'; ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint_tool.errors import InputError

#: transformers ``attribute_map`` aliases: the field a family reads -> the names a saved
#: config.json may spell it with (transformers 5's Qwen3MoeConfig maps ``num_experts`` to
#: ``num_local_experts`` and saves the latter; vLLM reads the config through transformers,
#: so both spellings load)
ALIASES: dict[str, tuple[str, ...]] = {"num_experts": ("num_local_experts",)}


def _is_language_config(inner: Any) -> bool:
    return isinstance(inner, Mapping) and "num_hidden_layers" in inner


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config: ``text_config`` for multimodal wrappers
    (Qwen3.5-MoE), the config itself otherwise."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and _is_language_config(inner) else config


def config_parts(config: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The dicts of config.json a field is looked up in, first one first (the objects
    themselves, not copies): ``[text_config, config]`` for a multimodal wrapper, ``[config]``
    for a plain config (``[config, text_config]`` when it has a ``text_config`` that is no
    language-model config)."""
    if config is None:
        return []
    inner = config.get("text_config")
    if not isinstance(inner, Mapping):
        return [config]
    if _is_language_config(inner):
        return [inner, config]
    return [config, inner]


def _walk(doc: Mapping[str, Any], key: str) -> Any:
    value: Any = doc
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def config_field(config: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """``key`` of config.json by the rule above: the first part that has it (None counts as
    absent), under its own name or an ``ALIASES`` spelling; ``default`` when none has it.
    Dotted keys walk into objects (``quantization_config.quant_method``)."""
    spellings = (key, *ALIASES.get(key, ()))
    for doc in config_parts(config):
        for name in spellings:
            value = _walk(doc, name)
            if value is not None:
                return value
    return default


def merged_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """config.json as one flat namespace by the same rule: every field of every part, with the
    value ``config_field`` reads for it (a None only where no part has a value; an
    ``ALIASES`` field also under its own name); the ``text_config`` object is left out.

    ``merged_config({"a": 1, "b": 2, "text_config": {"num_hidden_layers": 4, "b": 3}})``
    is ``{"a": 1, "b": 3, "num_hidden_layers": 4}``.
    """
    out: dict[str, Any] = {}
    for doc in reversed(config_parts(config)):
        for key, value in _with_aliases(doc).items():
            if key != "text_config" and (value is not None or key not in out):
                out[key] = value
    return out


def _with_aliases(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with each ``ALIASES`` field it lacks (or has as None) read from its
    first alias spelling that has a value."""
    out = dict(doc)
    for key, aliases in ALIASES.items():
        if out.get(key) is None:
            value = next((out[a] for a in aliases if out.get(a) is not None), None)
            if value is not None:
                out[key] = value
    return out


class ConfigView:
    """Typed reads of config.json fields (by ``config_field``), naming the family in errors.

    ``config`` is the whole config.json (a wrapper's ``text_config`` is found by the rule);
    a language-model config alone reads the same.
    """

    def __init__(self, config: Mapping[str, Any], *, family: str) -> None:
        self.config = config
        self.family = family

    def get(self, key: str, default: Any = None) -> Any:
        return config_field(self.config, key, default)

    def req_int(self, key: str) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"config.json: {self.family} model needs an integer {key!r} (got {value!r}); "
                "fix config.json or restore it from the model's release"
            )
        return value

    def opt_int(self, key: str, default: int) -> int:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"config.json: {key!r} must be an integer, got {value!r}; fix config.json"
            )
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise InputError(f"config.json: {key!r} must be a list of layer indices, got {value!r}")
        return list(value)

"""AMD Quark ``quantization_config`` and its two name-matching semantics.

**vLLM** (``QuarkConfig.get_quant_method`` / ``_find_matched_config``, the default here):

1. the *vLLM layer* is resolved, not the checkpoint module: routed experts
   ``X.experts.E.proj`` all load into the FusedMoE layer ``X.experts``; packed shards
   (``gate_proj``/``up_proj``, ``q_a_proj``/``kv_a_proj_with_mqa``) are each resolved and
   must agree (checked by ``resolve_catalog``);
2. ``exclude``: an entry matches when equal to the layer name, or with a ``re:`` prefix by
   ``re.match``; globs in ``exclude`` are NOT honoured. A FusedMoE layer is also excluded
   when any (non-``re:``) entry names a child of it (``X.experts.7.down_proj``):
   ``should_ignore_layer(check_children=True)``, quark/utils.py, as
   ``QuarkConfig.get_quant_method_target`` calls it for routed experts;
3. ``layer_quant_config`` in dict order: a key without ``*`` matches when the layer name is
   a *substring of the key*; a key with ``*`` by ``fnmatch``
   (``get_layer_quant_config_from_name``); a FusedMoE layer is matched as ``X.experts``
   only, with no per-expert probing (``QuarkMoEMethod.get_moe_method_target``);
4. ``layer_type_quant_config`` never matches (vLLM compares a class to string keys);
5. ``global_quant_config``.

**Quark (producer)**: per checkpoint module, ``exclude`` exact then fnmatch (``re:`` entries by
``re.match``) -> ``layer_quant_config`` exact key then first fnmatch key in dict order ->
``layer_type_quant_config`` (``Linear`` keys match every linear) -> global.
"""

from __future__ import annotations

import fnmatch
from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from checkpoint_tool.quant.configs.base import QuantConfigBase
from checkpoint_tool.quant.configs.names import expert_parts
from checkpoint_tool.quant.configs.quark_exclude import ExcludeIndex
from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec, scheme_from_spec
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.safe_regex import check_regex

#: layer_type_quant_config keys that name torch's linear class
LINEAR_TYPE_KEYS = {"Linear", "nn.Linear", "torch.nn.Linear", "torch.nn.modules.linear.Linear"}


class QuarkExport(BaseModel):
    """``export`` block (kv-cache groups, packing); vLLM requires it to be present."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kv_cache_group: list[str] = Field(default_factory=list)
    min_kv_scale: float | None = None
    pack_method: str | None = None
    weight_format: str | None = None
    weight_merge_groups: Any = None


class QuarkConfig(QuantConfigBase):
    """``quantization_config`` written by AMD Quark (any version; unknown keys kept)."""

    source: ClassVar[str] = "quark"

    quant_method: Literal["quark"] = "quark"
    global_quant_config: QuarkLayerSpec = Field(default_factory=QuarkLayerSpec)
    layer_quant_config: dict[str, QuarkLayerSpec] = Field(default_factory=dict)
    layer_type_quant_config: dict[str, QuarkLayerSpec] = Field(default_factory=dict)
    exclude: list[str] = Field(default_factory=list)
    export: QuarkExport | None = None
    algo_config: Any = None
    quant_mode: str | None = None
    version: str | None = None
    kv_cache_quant_config: Any = None

    #: (id of a spec owned by this config, rule) -> Scheme; specs live as long as the config
    #: match rule -> scheme (a rule names the config entry it matched: one spec per rule)
    _schemes: dict[str, Scheme] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _bounded_regexes(self) -> QuarkConfig:
        """Every ``re:`` entry of ``exclude`` and ``layer_quant_config`` runs in bounded time
        (``safe_regex``); refused otherwise, before any name is matched."""
        where = "config.json quantization_config"
        for entry in self.exclude:
            if entry.startswith("re:"):
                check_regex(entry[3:], f"{where}.exclude")
        for key in self.layer_quant_config:
            if key.startswith("re:"):
                check_regex(key[3:], f"{where}.layer_quant_config")
        return self

    @cached_property
    def exclude_index(self) -> ExcludeIndex:
        """``exclude`` indexed once (``quark_exclude``): a lookup costs the same for any length."""
        return ExcludeIndex(self.exclude)

    # -- vLLM semantics ------------------------------------------------------------------------

    def vllm_match(self, module: str) -> tuple[QuarkLayerSpec | None, str]:
        """The spec vLLM uses for ``module`` (None = excluded) and the rule that matched."""
        moe = expert_parts(module)
        layer = moe[0] if moe else module
        on = f" on FusedMoE layer {layer!r}" if moe else ""
        hit = self.exclude_index.vllm_first(layer, moe is not None)
        if hit is not None:
            entry, how = hit
            if how == "child":
                return None, f"vllm: exclude {entry!r} names a child of FusedMoE layer {layer!r}"
            return None, f"vllm: exclude {entry!r} ({how}){on}"
        hit = self._vllm_layer_key(layer)
        if hit is not None:
            key, how = hit
            return self.layer_quant_config[key], f"vllm: layer_quant_config[{key!r}] ({how}){on}"
        return self.global_quant_config, f"vllm: global_quant_config{on}"

    def _vllm_layer_key(self, layer: str) -> tuple[str, str] | None:
        for key in self.layer_quant_config:
            if "*" not in key:
                if layer in key:
                    how = "exact" if layer == key else "layer name is a substring of the key"
                    return key, how
            elif fnmatch.fnmatch(layer, key):
                return key, "fnmatch"
        return None

    # -- Quark (producer) semantics ------------------------------------------------------------

    def producer_match(self, module: str) -> tuple[QuarkLayerSpec | None, str]:
        """The spec Quark used when it wrote ``module`` (None = excluded) and why."""
        hit = self.exclude_index.producer_first(module)
        if hit is not None:
            entry, how = hit
            return None, f"quark: exclude {entry!r} ({how})"
        if module in self.layer_quant_config:
            return self.layer_quant_config[module], f"quark: layer_quant_config[{module!r}] (exact)"
        for key, spec in self.layer_quant_config.items():
            if fnmatch.fnmatch(module, key):
                return spec, f"quark: layer_quant_config[{key!r}] (fnmatch)"
        for key, spec in self.layer_type_quant_config.items():
            if key in LINEAR_TYPE_KEYS:
                return spec, f"quark: layer_type_quant_config[{key!r}]"
        return self.global_quant_config, "quark: global_quant_config"

    # -- QuantConfigBase -----------------------------------------------------------------------

    def _scheme(self, spec: QuarkLayerSpec | None, rule: str) -> Scheme:
        scheme = self._schemes.get(rule)
        if scheme is None:
            scheme = self._schemes[rule] = scheme_from_spec(spec, rule)
        return scheme

    def scheme_for(self, module: str) -> Scheme:
        return self._scheme(*self.vllm_match(module))

    def producer_scheme_for(self, module: str) -> Scheme:
        return self._scheme(*self.producer_match(module))

    def summary(self) -> str:
        glob = scheme_from_spec(self.global_quant_config, "global").short()
        return (
            f"quark {self.version or '?'}: global {glob}, "
            f"{len(self.layer_quant_config)} layer rules, {len(self.exclude)} excludes"
        )

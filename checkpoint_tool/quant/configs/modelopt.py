"""NVIDIA ModelOpt configs: ``hf_quant_config.json`` or an inline ``quant_method: modelopt``.

Two spellings, one model::

    hf_quant_config.json: {"producer": {...}, "quantization": {"quant_algo": "NVFP4",
                           "group_size": 16, "exclude_modules": ["lm_head"], ...}}
    config.json quantization_config: {"quant_method": "modelopt", "quant_algo": "NVFP4",
                           "group_size": 16, "ignore": ["lm_head"], ...}

NVFP4 writes ``weight`` U8, ``weight_scale`` F8_E4M3 ``[out, in/16]``, ``weight_scale_2`` F32
``[]`` and ``input_scale`` F32 ``[]``. FP8 writes ``weight_scale`` and ``input_scale`` F32 ``[]``.

vLLM (``ModelOptQuantConfigBase.is_layer_excluded``) excludes a layer when an entry equals it
(FusedMoE: substring rule of ``is_layer_skipped``), when an entry is a *substring* of the layer
name, or when the layer name fnmatches an entry. ModelOpt itself matched wildcards on module
names (the producer semantics here).
"""

from __future__ import annotations

import fnmatch
from typing import Any, ClassVar

from pydantic import Field, field_validator

from checkpoint_tool.quant.configs.base import QuantConfigBase, nvfp4_scheme, unquantized
from checkpoint_tool.quant.configs.names import expert_parts
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

SUPPORTED_ALGOS = ("NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN")


class ModelOptConfig(QuantConfigBase):
    """The ModelOpt ``quantization`` block, whichever file it came from."""

    source: ClassVar[str] = "modelopt"

    quant_algo: str
    group_size: int | None = None
    exclude_modules: list[str] = Field(default_factory=list)
    kv_cache_quant_algo: str | None = None
    producer: dict[str, Any] | None = None

    @field_validator("quant_algo")
    @classmethod
    def _known_algo(cls, v: str) -> str:
        v = str(v).upper()
        if v not in SUPPORTED_ALGOS:
            raise ValueError(f"quant_algo {v!r} is not supported; ckpt reads {SUPPORTED_ALGOS}")
        return v

    @classmethod
    def from_hf_quant_config(cls, doc: dict[str, Any]) -> ModelOptConfig:
        """From ``hf_quant_config.json`` (``{"producer", "quantization": {...}}``)."""
        q = dict(doc.get("quantization") or {})
        return cls.model_validate({**q, "producer": doc.get("producer")})

    @classmethod
    def from_inline(cls, qc: dict[str, Any]) -> ModelOptConfig:
        """From config.json ``quantization_config`` with ``quant_method: modelopt``."""
        if isinstance(qc.get("quantization"), dict):
            return cls.from_hf_quant_config(qc)
        body = {k: v for k, v in qc.items() if k not in ("quant_method", "ignore")}
        return cls.model_validate({**body, "exclude_modules": qc.get("ignore") or []})

    def quantized_scheme(self, rule: str) -> Scheme:
        if self.quant_algo == "NVFP4":
            return nvfp4_scheme(source=self.source, rule=rule, input_scale_suffix="input_scale")
        per_channel = self.quant_algo == "FP8_PER_CHANNEL_PER_TOKEN"
        return Scheme(
            format=WeightFormat.FP8_PER_CHANNEL if per_channel else WeightFormat.FP8_PER_TENSOR,
            weight_dtypes=("F8_E4M3",),
            scale_suffix="weight_scale",
            scale_dtypes=("F32",),
            input_scale_suffix=None if per_channel else "input_scale",
            input_scale_dtypes=() if per_channel else ("F32",),
            activation="dynamic" if per_channel else "static",
            source=self.source,
            rule=rule,
        )

    def _vllm_excluded(self, layer: str, is_moe: bool) -> str | None:
        for entry in self.exclude_modules:
            if is_moe:
                if "experts" in entry and layer in entry:
                    return f"exclude_modules {entry!r} contains FusedMoE layer {layer!r}"
            elif entry == layer:
                return f"exclude_modules {entry!r} (exact)"
        for entry in self.exclude_modules:
            if entry != layer and entry in layer:
                return f"exclude_modules {entry!r} (substring of the layer name)"
        for entry in self.exclude_modules:
            if fnmatch.fnmatch(layer, entry):
                return f"exclude_modules {entry!r} (fnmatch)"
        return None

    def scheme_for(self, module: str) -> Scheme:
        moe = expert_parts(module)
        layer = moe[0] if moe else module
        why = self._vllm_excluded(layer, moe is not None)
        if why is not None:
            return unquantized(self.source, f"vllm: {why}")
        on = f" (FusedMoE layer {layer!r})" if moe else ""
        return self.quantized_scheme(f"vllm: quant_algo {self.quant_algo}{on}")

    def producer_scheme_for(self, module: str) -> Scheme:
        for entry in self.exclude_modules:
            if fnmatch.fnmatch(module, entry):
                return unquantized(self.source, f"modelopt: exclude_modules {entry!r}")
        return self.quantized_scheme(f"modelopt: quant_algo {self.quant_algo}")

    def summary(self) -> str:
        group = f"/{self.group_size}" if self.group_size else ""
        return f"modelopt {self.quant_algo}{group}, {len(self.exclude_modules)} excluded patterns"

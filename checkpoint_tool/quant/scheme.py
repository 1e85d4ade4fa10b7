"""What a quantization scheme is, independent of who wrote the config.

A ``Scheme`` answers, for one module (a linear or an expert projection): how its weight is
stored, which sibling tensors hold its scales and how they are encoded, and *why* this scheme
applies (the rule that matched). Config models (DeepSeek FP8, Quark, ModelOpt) produce it;
policy, plan, validate and the runtime consume it.

Example (a Quark MXFP4 expert projection)::

    Scheme(format="mxfp4", weight_dtype="U8", group_size=32,
           scale_suffix="weight_scale", scale_dtype="U8",
           source="quark", rule="global_quant_config", spec={...})
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict

from checkpoint_tool.formats import format_of
from checkpoint_tool.formats.names import WeightFormat

__all__ = ["Scheme", "WeightFormat"]


class Scheme(BaseModel):
    """How one module's weight and scales are stored, and which config rule said so."""

    model_config = ConfigDict(frozen=True)

    format: WeightFormat
    #: safetensors dtype(s) the weight may have on disk, e.g. ("U8",) or ("I8", "U8")
    weight_dtypes: tuple[str, ...] = ()
    #: FP8 block size (rows, cols), e.g. (128, 128)
    block: tuple[int, int] | None = None
    #: MX / NV group size along the input dim (32 MXFP4/MXFP8, 16 NVFP4)
    group_size: int | None = None
    #: sibling tensor suffix that holds the (block/group/channel/tensor) scale
    scale_suffix: str | None = None
    #: safetensors dtype(s) of that scale, e.g. ("F32",), ("U8", "F8_E8M0"), ("BF16",)
    scale_dtypes: tuple[str, ...] = ()
    #: e8m0 scales (MX, DeepSeek ue8m0) vs float scales
    scale_is_e8m0: bool = False
    #: NVFP4 per-tensor global multiplier suffix (weight_scale_2)
    global_scale_suffix: str | None = None
    #: static activation scale suffix if the producer writes one (input_scale / input_scale_2)
    input_scale_suffix: str | None = None
    #: safetensors dtype(s) of that activation scale, e.g. ("BF16",) for Quark FP8, ("F32",) NVFP4
    input_scale_dtypes: tuple[str, ...] = ()
    #: "dynamic", "static", or None for weight-only / unquantized
    activation: str | None = None
    #: which config family produced it: "none" | "deepseek_fp8" | "quark" | "modelopt" | "deepseek_v4"
    source: str = "none"
    #: human-readable reason: which rule matched (e.g. "exclude: exact 'lm_head'")
    rule: str = ""
    #: the raw producer spec (Quark dict / list) used for equality between routed and shared
    spec: Any = None
    #: parameter suffix of the stored weight: ``weight``, or compressed-tensors' packed
    #: formats' ``weight_packed``
    weight_suffix: str = "weight"
    #: packed zero points of an asymmetric integer weight (compressed-tensors
    #: ``weight_zero_point``), None when symmetric
    zero_point_suffix: str | None = None
    #: the global scale divides (compressed-tensors NVFP4 ``weight_global_scale`` is
    #: ``1 / weight_scale_2`` of ModelOpt); False: it multiplies
    global_scale_divides: bool = False

    @property
    def quantized(self) -> bool:
        return self.format is not WeightFormat.UNQUANTIZED

    def storage_identity(self) -> tuple:
        """What the stored bytes are: format, weight dtypes, block, group size, scale encoding
        and dtypes. Equal for two schemes that store a weight the same way, whatever rule,
        source, scale names or raw producer spec gave them (e.g. two Quark specs that differ
        in a key that does not change the bytes).

        Example: ``mxfp4_scheme(source="quark", rule="...").storage_identity()`` ->
        ``(WeightFormat.MXFP4, ('U8',), None, 32, True, ('U8',), False, False)``
        """
        return (
            self.format,
            self.weight_dtypes,
            self.block,
            self.group_size,
            self.scale_is_e8m0,
            self.scale_dtypes,
            self.zero_point_suffix is not None,
            self.global_scale_divides,
        )

    @cached_property
    def storage_key(self) -> tuple:
        """``storage_identity()``, computed once per scheme: the key of the storage codec a
        planner looks up for every expert tensor (a scheme is frozen, its bytes never change)."""
        return self.storage_identity()

    def producer_identity(self) -> tuple:
        """``storage_identity`` plus the scale tensors' names and the raw producer spec: strict,
        for telling how vLLM reads a module from how its producer wrote it (and for vLLM's own
        deep comparison of the shard configs it merges).

        Example: two Quark specs that differ only in an ignored key have the same
        ``storage_identity()`` but different ``producer_identity()``.
        """
        return (
            *self.storage_identity(),
            self.scale_suffix,
            self.global_scale_suffix,
            self.input_scale_suffix,
            self.weight_suffix,
            self.zero_point_suffix,
            repr(self.spec),
        )

    @cached_property
    def siblings_key(self) -> tuple:
        """What decides the tensors stored next to the weight (``producer_identity`` and the
        input scale's dtypes), computed once per scheme: a memo key for sibling checks."""
        return (self.producer_identity(), self.input_scale_dtypes)

    def scale_names(self, module: str) -> list[str]:
        """Names of the sibling tensors this scheme expects next to ``module.weight``."""
        out = []
        for suffix in (
            self.scale_suffix,
            self.global_scale_suffix,
            self.input_scale_suffix,
            self.zero_point_suffix,
        ):
            if suffix:
                out.append(f"{module}.{suffix}")
        return out

    def short(self) -> str:
        """Compact label for tables, e.g. ``fp8_block[128,128]`` or ``mxfp4/32`` (the format's)."""
        return format_of(self).short(self)

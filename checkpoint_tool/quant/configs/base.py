"""Common shape of every quantization config model, and small ``Scheme`` builders.

A config answers ``scheme_for(module)`` with vLLM's name-matching semantics (what the engine
will do) and ``producer_scheme_for(module)`` with the producer's (what the file holds). For
DeepSeek FP8, ModelOpt and DeepSeek-V4 the two agree except where vLLM matches on fused
layer names; for Quark they differ in documented ways (see ``configs.quark``).

Example::

    cfg = DeepSeekFp8Config.model_validate({"quant_method": "fp8", "weight_block_size": [128, 128],
                                            "activation_scheme": "dynamic"})
    cfg.scheme_for("model.layers.3.mlp.experts.0.down_proj").short()   # 'fp8_block[128,128]'
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from checkpoint_tool.quant.scheme import Scheme, WeightFormat

FLOAT_DTYPES = ("BF16", "F16", "F32")


class QuantConfigBase(BaseModel):
    """Base for config models: unknown keys are kept (producers add keys every release)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    #: "none" | "deepseek_fp8" | "quark" | "modelopt" | "deepseek_v4"
    source: ClassVar[str] = "none"
    #: vLLM loads every routed expert of a layer into one FusedMoE layer (``X.experts``) and
    #: resolves that layer, never one expert: ``scheme_for("X.experts.E.proj")`` is the same
    #: for every E. ``resolve_catalog`` relies on it to resolve each (layer, projection) once
    #: instead of once per expert; a config whose ``scheme_for`` looks at E must set False.
    experts_resolve_by_layer: ClassVar[bool] = True

    def scheme_for(self, module: str) -> Scheme:
        """Scheme of ``module`` as vLLM resolves it."""
        raise NotImplementedError

    def table_scheme_for(self, module: str) -> Scheme | None:
        """Scheme of a quantized lookup table that is not a linear (None: not one)."""
        return None

    def producer_scheme_for(self, module: str) -> Scheme:
        """Scheme of ``module`` as the producer resolved it when writing the files."""
        return self.scheme_for(module)

    def summary(self) -> str:
        """One line describing the config, e.g. ``quark 0.13: global mxfp4/32, 1 layer rule``."""
        return self.source


def unquantized(source: str, rule: str) -> Scheme:
    """A float weight stored as is."""
    return Scheme(
        format=WeightFormat.UNQUANTIZED, weight_dtypes=FLOAT_DTYPES, source=source, rule=rule
    )


def with_rule(scheme: Scheme, rule: str) -> Scheme:
    """The same scheme, explained by ``rule``."""
    return scheme.model_copy(update={"rule": rule})


def fp8_block_scheme(
    block: tuple[int, int],
    *,
    scale_suffix: str,
    scale_dtypes: tuple[str, ...],
    e8m0: bool,
    source: str,
    rule: str,
    spec: object = None,
    weight_dtypes: tuple[str, ...] = ("F8_E4M3",),
) -> Scheme:
    """FP8 E4M3 weight with one scale per ``block`` (rows, cols), dynamic activations."""
    return Scheme(
        format=WeightFormat.FP8_BLOCK,
        weight_dtypes=weight_dtypes,
        block=(int(block[0]), int(block[1])),
        scale_suffix=scale_suffix,
        scale_dtypes=scale_dtypes,
        scale_is_e8m0=e8m0,
        activation="dynamic",
        source=source,
        rule=rule,
        spec=spec,
    )


#: what an MX weight stores, per format: MXFP4 packs two E2M1 values a byte, MXFP8 is E4M3
MX_WEIGHT_DTYPES = {WeightFormat.MXFP4: ("U8",), WeightFormat.MXFP8: ("F8_E4M3",)}


def mx_scheme(
    fmt: WeightFormat,
    *,
    source: str,
    rule: str,
    scale_suffix: str = "weight_scale",
    weight_dtypes: tuple[str, ...] | None = None,
    scale_dtypes: tuple[str, ...] = ("U8",),
    activation: str | None = "dynamic",
    spec: object = None,
    input_scale_suffix: str | None = None,
    input_scale_dtypes: tuple[str, ...] = (),
) -> Scheme:
    """OCP MX (``fmt`` MXFP4 or MXFP8): one E8M0 scale per 32 inputs; ``mxfp4_scheme`` and
    ``mxfp8_scheme`` fix ``fmt``. Weight dtypes default to ``MX_WEIGHT_DTYPES[fmt]``.

    ``mxfp8_scheme(source="quark", rule="...")`` -> ``Scheme(format=mxfp8,
    weight_dtypes=('F8_E4M3',), group_size=32, scale_dtypes=('U8',), scale_is_e8m0=True, ...)``
    """
    return Scheme(
        format=fmt,
        weight_dtypes=weight_dtypes or MX_WEIGHT_DTYPES[fmt],
        group_size=32,
        scale_suffix=scale_suffix,
        scale_dtypes=scale_dtypes,
        scale_is_e8m0=True,
        input_scale_suffix=input_scale_suffix,
        input_scale_dtypes=input_scale_dtypes,
        activation=activation,
        source=source,
        rule=rule,
        spec=spec,
    )


mxfp4_scheme = partial(mx_scheme, WeightFormat.MXFP4)
mxfp8_scheme = partial(mx_scheme, WeightFormat.MXFP8)


def nvfp4_scheme(
    *, source: str, rule: str, input_scale_suffix: str | None, spec: object = None
) -> Scheme:
    """NVFP4: packed E2M1, E4M3 scale per 16 inputs, F32 0-d ``weight_scale_2`` multiplier."""
    return Scheme(
        format=WeightFormat.NVFP4,
        weight_dtypes=("U8",),
        group_size=16,
        scale_suffix="weight_scale",
        scale_dtypes=("F8_E4M3",),
        global_scale_suffix="weight_scale_2",
        input_scale_suffix=input_scale_suffix,
        input_scale_dtypes=("F32",),
        activation="static",
        source=source,
        rule=rule,
        spec=spec,
    )


class NoQuantConfig(QuantConfigBase):
    """No ``quantization_config``: every weight is stored in float."""

    source: ClassVar[str] = "none"

    def scheme_for(self, module: str) -> Scheme:
        return unquantized(self.source, "no quantization_config")

    def summary(self) -> str:
        return "not quantized"

"""Quark layer specs (``{weight, input_tensors, output_tensors, bias}``) and their ``Scheme``.

Each slot is null, one tensor config, or a list of two (NVFP4: ``[fp4 per_group 16, fp8
per_tensor]``; W4A8: ``[fp8 per_tensor, int4 per_channel]``). Tensor-config keys vary by Quark
version (0.8 has dtype/is_dynamic/qscheme/ch_axis/group_size/...; later versions add
scale_format, block_size, mx_element_dtype, ...): the models below validate and keep them all
(unknown keys too); ``scheme_from_spec`` builds the ``Scheme`` from ``quark_record``'s reading
of the spec, the one ``policy.engine.quark_detect`` reads to predict vLLM.

What Quark writes per scheme (seen in Quark 0.13 exports):

- FP8 per-tensor / per-channel: ``weight`` F8_E4M3, ``weight_scale`` in the model dtype (BF16)
  shaped ``[]`` / ``[out]``; a static FP8 activation adds ``input_scale`` (BF16, ``[]``).
- FP8 per-block: ``weight_scale`` F32 ``[ceil(out/b0), ceil(in/b1)]`` (E8M0 bytes if
  ``scale_type`` is ``float8_e8m0fnu``).
- MXFP4 / MXFP8: ``weight`` U8 (packed FP4) or F8_E4M3, ``weight_scale`` U8 E8M0 ``[out, in/32]``.
- NVFP4: ``weight`` U8, ``weight_scale`` F8_E4M3 ``[out, in/16]``, ``weight_scale_2`` F32 ``[]``,
  ``input_scale_2`` F32 ``[]``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from checkpoint_tool.quant.configs.base import (
    FLOAT_DTYPES,
    fp8_block_scheme,
    mxfp4_scheme,
    nvfp4_scheme,
    unquantized,
)
from checkpoint_tool.quant.configs.quark_record import QuarkLayer, QuarkSlot, QuarkTensor
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

SOURCE = "quark"


class QuarkTensorSpec(BaseModel):
    """One tensor's quantization (weight, input, output or bias)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    dtype: str | None = None
    qscheme: str | None = None
    is_dynamic: bool | None = None
    ch_axis: int | None = None
    group_size: int | None = None
    block_size: Any = None
    symmetric: bool | None = None
    round_method: str | None = None
    scale_type: str | None = None
    scale_format: str | None = None
    scale_calculation_mode: str | None = None
    mx_element_dtype: str | None = None
    is_scale_quant: bool | None = None
    observer_cls: str | None = None


Slot = QuarkTensorSpec | list[QuarkTensorSpec] | None


class QuarkLayerSpec(BaseModel):
    """A Quark quantization spec for one layer (or the global default)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    weight: Slot = None
    input_tensors: Slot = None
    output_tensors: Slot = None
    bias: Slot = None
    target_device: Any = None

    @field_validator("weight", "input_tensors", "output_tensors", "bias")
    @classmethod
    def _one_or_two(cls, v: Slot) -> Slot:
        if isinstance(v, list) and not 1 <= len(v) <= 2:
            raise ValueError(f"a slot holds one tensor config or a list of two, got {len(v)}")
        return v

    def raw(self) -> dict[str, Any]:
        """The spec as the producer wrote it (used for spec equality, like vLLM's deep_compare)."""
        return self.model_dump(mode="json")


#: FP8 weight qscheme -> format, for the scale-per-tensor and scale-per-row layouts
_FP8_FORMATS = {
    "per_tensor": WeightFormat.FP8_PER_TENSOR,
    "per_channel": WeightFormat.FP8_PER_CHANNEL,
}

#: NVFP4's two weight configs: (dtype, qscheme, group_size) of the first, (dtype, qscheme) of the
#: second
_NVFP4 = ("fp4", "per_group", 16, "fp8_e4m3", "per_tensor")


def _activation(inp: QuarkSlot | None) -> str | None:
    """None (weight-only), "static" when any input config is written static, else "dynamic"."""
    if inp is None:
        return None
    return "static" if any(t.is_dynamic is False for t in inp.parts) else "dynamic"


def _unsupported(first: QuarkTensor | None, rule: str, spec: dict, why: str) -> Scheme:
    dtype = first.dtype if first is not None else None
    dtypes = {"int8": ("I8",), "fp8_e4m3": ("F8_E4M3",)}.get(dtype or "", ("U8", "I8", "I32"))
    return Scheme(
        format=WeightFormat.UNSUPPORTED,
        weight_dtypes=dtypes,
        scale_suffix="weight_scale",
        source=SOURCE,
        rule=f"{rule}; {why}",
        spec=spec,
    )


def scheme_from_spec(spec: QuarkLayerSpec | None, rule: str) -> Scheme:
    """Translate a Quark layer spec (None = excluded) into a ``Scheme`` explained by ``rule``.

    Example: the ``mxfp4`` spec of ``synth/quark_specs.json`` -> ``Scheme(format="mxfp4",
    group_size=32, scale_dtypes=("U8",), activation="dynamic", ...)``.
    """
    if spec is None:
        return unquantized(SOURCE, rule)
    raw = spec.raw()
    layer = QuarkLayer.parse(raw)
    w, inp = layer.weight, layer.input
    if w is None:
        return unquantized(SOURCE, f"{rule}; weight: null").model_copy(update={"spec": raw})
    if w.listed:
        return _two_part_scheme(w, inp, rule, raw)
    return _single_weight_scheme(w.parts[0], inp, rule, raw)


def _two_part_scheme(w: QuarkSlot, inp: QuarkSlot | None, rule: str, raw: dict) -> Scheme:
    """NVFP4 ``[fp4 per_group 16, fp8_e4m3 per_tensor]``; a static second input config means
    an ``input_scale_2`` tensor. Any other list (W4A8 int4, a list of one) has no codec."""
    w0, w1 = w.parts if len(w.parts) == 2 else (None, None)
    if w0 and w1 and (w0.dtype, w0.qscheme, w0.group_size, w1.dtype, w1.qscheme) == _NVFP4:
        second = inp.parts[1] if inp is not None and inp.listed and len(inp.parts) == 2 else None
        static = second is not None and second.is_dynamic is False
        return nvfp4_scheme(
            source=SOURCE,
            rule=rule,
            input_scale_suffix="input_scale_2" if static else None,
            spec=raw,
        ).model_copy(update={"input_scale_dtypes": ("F32",) if static else ()})
    why = "two-part weight spec other than NVFP4 (e.g. W4A8 int4)"
    return _unsupported(w.first, rule, raw, why)


def _single_weight_scheme(w: QuarkTensor, inp: QuarkSlot | None, rule: str, raw: dict) -> Scheme:
    """FP8 per-tensor / per-channel / per-block, MXFP8 or MXFP4 (scale_format "e8m0" in any
    case); a static per-tensor FP8 input written as one dict means an ``input_scale`` tensor."""
    first_in = inp.plain if inp is not None else None
    static_fp8_in = (
        first_in is not None
        and first_in.is_dynamic is False
        and (first_in.dtype, first_in.qscheme) == ("fp8_e4m3", "per_tensor")
    )
    common: dict[str, Any] = {
        "input_scale_suffix": "input_scale" if static_fp8_in else None,
        "input_scale_dtypes": FLOAT_DTYPES if static_fp8_in else (),
        "activation": _activation(inp),
        "source": SOURCE,
        "rule": rule,
        "spec": raw,
    }
    e8m0_format = (w.scale_format or "").lower() == "e8m0"
    mx_group = w.qscheme == "per_group" and w.group_size == 32 and e8m0_format
    if w.dtype == "fp8_e4m3" and w.qscheme in _FP8_FORMATS:
        return Scheme(
            format=_FP8_FORMATS[w.qscheme],
            weight_dtypes=("F8_E4M3",),
            scale_suffix="weight_scale",
            scale_dtypes=FLOAT_DTYPES,
            **common,
        )
    if w.dtype == "fp8_e4m3" and w.qscheme == "per_block":
        e8m0 = "e8m0" in (w.scale_type or "") or e8m0_format
        float_dtypes = ("F32",) if w.scale_type == "float32" else ("F32", "BF16", "F16")
        block = w.block if w.block is not None and len(w.block) == 2 else (128, 128)
        return fp8_block_scheme(
            (int(block[0]), int(block[1])),
            scale_suffix="weight_scale",
            scale_dtypes=("U8", "F8_E8M0") if e8m0 else float_dtypes,
            e8m0=e8m0,
            source=SOURCE,
            rule=rule,
            spec=raw,
        ).model_copy(update={"activation": common["activation"]})
    if w.dtype in ("fp8_e4m3", "fp4") and mx_group:
        # MXFP8 stores its scales as MXFP4 does (one E8M0 byte per 32 inputs): only the
        # weight differs, unpacked F8_E4M3 instead of packed FP4 pairs
        mx = mxfp4_scheme(source=SOURCE, rule=rule)
        if w.dtype == "fp8_e4m3":
            common.update(format=WeightFormat.MXFP8, weight_dtypes=("F8_E4M3",))
        return mx.model_copy(update=common)
    why = f"weight {w.dtype} {w.qscheme} group {w.group_size} has no codec in ckpt"
    return _unsupported(w, rule, raw, why)

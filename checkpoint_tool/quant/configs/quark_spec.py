"""Quark layer specs (``{weight, input_tensors, output_tensors, bias}``) and their ``Scheme``.

Each slot is null, one tensor config, or a list of two (NVFP4: ``[fp4 per_group 16, fp8
per_tensor]``; W4A8: ``[fp8 per_tensor, int4 per_channel]``). Tensor-config keys vary by Quark
version (0.8 has dtype/is_dynamic/qscheme/ch_axis/group_size/...; later versions add
scale_format, block_size, mx_element_dtype, ...): unknown keys are kept.

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


def _first(slot: Slot) -> QuarkTensorSpec | None:
    return slot[0] if isinstance(slot, list) else slot


def _is_static(t: QuarkTensorSpec | None) -> bool:
    return t is not None and t.is_dynamic is False


def _activation(inp: Slot) -> str | None:
    if inp is None:
        return None
    return (
        "static"
        if any(_is_static(t) for t in (inp if isinstance(inp, list) else [inp]))
        else "dynamic"
    )


def _block(t: QuarkTensorSpec) -> tuple[int, int]:
    b = t.block_size
    if isinstance(b, list | tuple) and len(b) == 2:
        return int(b[0]), int(b[1])
    if isinstance(b, int):
        return b, b
    return 128, 128


def _unsupported(w: QuarkTensorSpec | list, rule: str, spec: dict, why: str) -> Scheme:
    first = w[0] if isinstance(w, list) else w
    dtypes = {"int8": ("I8",), "fp8_e4m3": ("F8_E4M3",)}.get(first.dtype or "", ("U8", "I8", "I32"))
    return Scheme(
        format=WeightFormat.UNSUPPORTED,
        weight_dtypes=dtypes,
        scale_suffix="weight_scale",
        source=SOURCE,
        rule=f"{rule}; {why}",
        spec=spec,
    )


def scheme_from_spec(spec: QuarkLayerSpec | None, rule: str) -> Scheme:
    """Translate a Quark layer spec (None = excluded) into a ``Scheme`` explained by ``rule``."""
    if spec is None:
        return unquantized(SOURCE, rule)
    w, inp, raw = spec.weight, spec.input_tensors, spec.raw()
    if w is None:
        return unquantized(SOURCE, f"{rule}; weight: null").model_copy(update={"spec": raw})
    act = _activation(inp)
    if isinstance(w, list):
        if (
            len(w) == 2
            and w[0].dtype == "fp4"
            and w[0].qscheme == "per_group"
            and w[0].group_size == 16
            and w[1].dtype == "fp8_e4m3"
            and w[1].qscheme == "per_tensor"
        ):
            inp_second = inp[1] if isinstance(inp, list) and len(inp) == 2 else None
            return nvfp4_scheme(
                source=SOURCE,
                rule=rule,
                input_scale_suffix="input_scale_2" if _is_static(inp_second) else None,
                spec=raw,
            ).model_copy(update={"input_scale_dtypes": ("F32",) if _is_static(inp_second) else ()})
        return _unsupported(w, rule, raw, "two-part weight spec other than NVFP4 (e.g. W4A8 int4)")
    return _single_weight_scheme(w, inp, act, rule, raw)


def _single_weight_scheme(
    w: QuarkTensorSpec, inp: Slot, act: str | None, rule: str, raw: dict
) -> Scheme:
    first_in = _first(inp)
    static_fp8_in = (
        first_in is not None
        and not isinstance(inp, list)
        and _is_static(first_in)
        and first_in.dtype == "fp8_e4m3"
        and first_in.qscheme == "per_tensor"
    )
    in_suffix = "input_scale" if static_fp8_in else None
    in_dtypes = FLOAT_DTYPES if static_fp8_in else ()
    e8m0_scale = (w.scale_format or "").lower() == "e8m0"
    if w.dtype == "fp8_e4m3":
        if w.qscheme in ("per_tensor", "per_channel"):
            fmt = (
                WeightFormat.FP8_PER_TENSOR
                if w.qscheme == "per_tensor"
                else WeightFormat.FP8_PER_CHANNEL
            )
            return Scheme(
                format=fmt,
                weight_dtypes=("F8_E4M3",),
                scale_suffix="weight_scale",
                scale_dtypes=FLOAT_DTYPES,
                input_scale_suffix=in_suffix,
                input_scale_dtypes=in_dtypes,
                activation=act,
                source=SOURCE,
                rule=rule,
                spec=raw,
            )
        if w.qscheme == "per_block":
            e8m0 = "e8m0" in (w.scale_type or "") or e8m0_scale
            float_dtypes = ("F32",) if w.scale_type == "float32" else ("F32", "BF16", "F16")
            return fp8_block_scheme(
                _block(w),
                scale_suffix="weight_scale",
                scale_dtypes=("U8", "F8_E8M0") if e8m0 else float_dtypes,
                e8m0=e8m0,
                source=SOURCE,
                rule=rule,
                spec=raw,
            ).model_copy(update={"activation": act})
        if w.qscheme == "per_group" and w.group_size == 32 and e8m0_scale:
            return Scheme(
                format=WeightFormat.MXFP8,
                weight_dtypes=("F8_E4M3",),
                group_size=32,
                scale_suffix="weight_scale",
                scale_dtypes=("U8",),
                scale_is_e8m0=True,
                input_scale_suffix=in_suffix,
                input_scale_dtypes=in_dtypes,
                activation=act,
                source=SOURCE,
                rule=rule,
                spec=raw,
            )
    if w.dtype == "fp4" and w.qscheme == "per_group" and w.group_size == 32 and e8m0_scale:
        return mxfp4_scheme(source=SOURCE, rule=rule, activation=act, spec=raw).model_copy(
            update={"input_scale_suffix": in_suffix, "input_scale_dtypes": in_dtypes}
        )
    why = f"weight {w.dtype} {w.qscheme} group {w.group_size} has no codec in ckpt"
    return _unsupported(w, rule, raw, why)

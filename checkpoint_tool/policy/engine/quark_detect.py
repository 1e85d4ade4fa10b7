"""vLLM's Quark scheme detection, mirrored on the read spec (no engine code, same decisions).

``detect_linear(spec)`` follows ``QuarkConfig._get_scheme_cls_from_config`` and
``detect_moe(spec)`` follows ``QuarkMoEMethod.get_moe_method_target`` plus the method
constructors (``quark/quark.py``, ``quark/quark_moe.py``): both return a ``Detection`` whose
``scheme`` names what vLLM builds, or whose ``rule`` is the rule id of the refusal with the
parameters of its message. The spec dict is read by ``quant.configs.quark_record`` (the reading
``quark_spec`` builds ckpt's ``Scheme`` from); the predicates below compare the record's
fields where vLLM calls ``.get(key)`` on the dict, in vLLM's order.

Example::

    detect_moe({"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                           "scale_format": "e8m0"}, "input_tensors": None})
    # Detection(scheme='ocp_mx', rule=None, params={})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checkpoint_tool.quant.configs.quark_record import QuarkLayer, QuarkSlot, QuarkTensor

#: Quark dtypes whose "mx" form is in vLLM's _WEIGHT_QUANT_KEY_MAP (utils/ocp_mx_utils.py):
#: mxfp4, mxfp6_e3m2, mxfp6_e2m3 and mxfp8_e4m3 (MXFP8)
_OCP_MX_WEIGHT_DTYPES = {"fp4", "fp6_e3m2", "fp6_e2m3", "fp8_e4m3"}
#: MX dtypes that may use the 2-D per_block spelling (OCP_MX_UNPACKED_DTYPES)
_OCP_MX_UNPACKED = {"fp8_e4m3"}
_OCP_MX_INPUT_DTYPES = {"fp4", "fp6_e3m2", "fp6_e2m3", "fp8_e4m3"}

Tensor = QuarkTensor | None


@dataclass(frozen=True)
class Detection:
    """``scheme``: what vLLM builds ("fp8", "fp8_block", "ocp_mx", "nvfp4", "int8", "w4a8",
    "w4a8_mxfp4_fp8", "w4a16_int4"); ``rule``: the rule id when vLLM refuses (or warns), with ``params``."""

    scheme: str | None
    rule: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


def _unwrap(slot: QuarkSlot | None) -> Tensor:
    """``QuarkConfig._unwrap_single_quant_config``: a one-entry list is its entry."""
    return slot.one if slot is not None else None


def is_fp8_w4a8(w: QuarkSlot | None, i: QuarkSlot | None) -> bool:
    """``QuarkConfig._is_fp8_w4a8``: [fp8 per_tensor, int4 per_channel (symmetric, ch_axis 0)]
    static weights, one fp8 input config (dynamic, or per_tensor)."""
    inp = _unwrap(i)
    if w is None or not w.listed or len(w.parts) != 2 or inp is None:
        return False
    w0, w1 = w.parts
    ok = (
        w0.dtype == "fp8_e4m3"
        and w1.dtype == "int4"
        and inp.dtype == "fp8_e4m3"
        and not w0.is_dynamic
        and not w1.is_dynamic
        and w0.qscheme == "per_tensor"
        and w1.qscheme == "per_channel"
        and w1.symmetric is True
        and w1.ch_axis == 0
    )
    return ok and (bool(inp.is_dynamic) or inp.qscheme == "per_tensor")


def is_nvfp4(w: QuarkSlot | None, i: QuarkSlot | None) -> bool:
    """``QuarkConfig._is_nvfp4``: [fp4 per_group 16, fp8 per_tensor] for both weight and
    input (input fp4 dynamic, the rest static)."""
    if w is None or i is None or not (w.listed and i.listed):
        return False
    if len(w.parts) != 2 or len(i.parts) != 2:
        return False
    (w0, w1), (i0, i1) = w.parts, i.parts
    return (
        _fp4_group16(w0)
        and not w0.is_dynamic
        and _fp4_group16(i0)
        and bool(i0.is_dynamic)
        and all(t.dtype == "fp8_e4m3" and t.qscheme == "per_tensor" for t in (w1, i1))
        and not w1.is_dynamic
        and not i1.is_dynamic
    )


def _fp4_group16(t: QuarkTensor) -> bool:
    return t.dtype == "fp4" and t.qscheme == "per_group" and t.group_size == 16


def fp8_w8a8_kind(w: Tensor, i: Tensor) -> str | None:
    """ "block" / "block_e8m0" / "tensor_or_channel" when ``QuarkConfig._is_fp8_w8a8`` matches."""
    if w is None or i is None:
        return None
    if w.dtype != "fp8_e4m3" or i.dtype != "fp8_e4m3" or w.is_dynamic:
        return None
    block = w.block or ()
    if w.qscheme == "per_block" and block == (128, 128) and w.symmetric is True:
        dyn_group = (
            bool(i.is_dynamic)
            and i.qscheme == "per_group"
            and i.group_size == block[1]
            and i.symmetric is True
        )
        if not dyn_group:
            return None
        return "block_e8m0" if w.scale_type == "float8_e8m0fnu" else "block"
    if w.qscheme not in ("per_tensor", "per_channel"):
        return None
    if i.is_dynamic or i.qscheme == "per_tensor":
        return "tensor_or_channel"
    return None


def is_w8a8_int8(w: Tensor, i: Tensor) -> bool:
    """``QuarkConfig._is_w8a8_int8``: symmetric int8 weights, static per-tensor or dynamic
    per-channel int8 input."""
    if w is None or i is None:
        return False
    static_in = i.qscheme == "per_tensor" and not i.is_dynamic
    dynamic_in = i.qscheme == "per_channel" and i.is_dynamic is True
    return (
        w.dtype == "int8"
        and i.dtype == "int8"
        and w.qscheme in ("per_tensor", "per_channel")
        and w.symmetric is True
        and ((static_in and not w.is_dynamic) or dynamic_in)
    )


def _mx_group32(w: QuarkTensor) -> bool:
    """The 1-D OCP MX weight spelling: per_group 32 with scale_format "e8m0" (exactly)."""
    return w.qscheme == "per_group" and w.group_size == 32 and w.scale_format == "e8m0"


def is_w4a8_mxfp4_fp8(w: Tensor, i: Tensor) -> bool:
    """``QuarkConfig._is_w4a8_mxfp4_fp8``: static MXFP4 weights, static symmetric per-tensor
    fp8 input."""
    if w is None or i is None:
        return False
    return (
        w.dtype == "fp4"
        and _mx_group32(w)
        and not w.is_dynamic
        and i.dtype == "fp8_e4m3"
        and i.qscheme == "per_tensor"
        and not i.is_dynamic
        and i.symmetric is True
    )


def ocp_mx_weight(w: Tensor) -> bool:
    """vLLM's ``ocp_mx_weight_dtype_and_rows`` is not None: an OCP MX weight spec, spelled 1-D
    (per_group 32, scale_format e8m0) or, for MXFP8, 2-D (per_block [R, 32], scale_type
    float8_e8m0fnu, symmetric, static)."""
    if w is None or w.dtype not in _OCP_MX_WEIGHT_DTYPES:
        return False
    if w.qscheme == "per_group":
        return _mx_group32(w)
    if w.qscheme == "per_block" and w.dtype in _OCP_MX_UNPACKED:
        block = w.block or ()
        return (
            len(block) == 2
            and block[1] == 32
            and w.scale_type == "float8_e8m0fnu"
            and w.symmetric is True
            and not w.is_dynamic
        )
    return False


def is_ocp_mx(w: Tensor, i: Tensor, *, allow_static_fp8: bool) -> bool:
    """``QuarkConfig._is_w_ocp_mx_a_x``: an OCP MX weight (MXFP4/6/8); activations: none,
    dynamic MX/FP8, or (MoE only) static symmetric per-tensor FP8."""
    if not ocp_mx_weight(w):
        return False
    if i is None:
        return True
    if not i.is_dynamic:
        return (
            allow_static_fp8
            and i.dtype == "fp8_e4m3"
            and i.qscheme == "per_tensor"
            and i.symmetric is True
        )
    return i.dtype in _OCP_MX_INPUT_DTYPES


def is_w4a16_int4(w: Tensor, i: Tensor, pack_method: str | None) -> bool:
    """``QuarkConfig._is_w4a16_int4``: int4/uint4 weights, no input quantization, and the
    export packed them (``pack_method`` order / reorder; absent means None, not packed)."""
    return (
        w is not None
        and i is None
        and w.dtype in ("int4", "uint4")
        and pack_method in ("order", "reorder")
    )


def spec_text(spec: dict) -> str:
    """``weight fp4/per_group 32/static, input fp4/per_group 32/dynamic``."""
    return QuarkLayer.parse(spec).text()


Multi = Callable[[QuarkSlot | None, QuarkSlot | None], Detection]
Single = Callable[[Tensor, Tensor, str | None], Detection]


def _detect(spec: dict | None, pack_method: str | None, multi: Multi, single: Single) -> Detection:
    """The steps ``_get_scheme_cls_from_config`` and ``get_moe_method_target`` share: refuse
    quantized output/bias, send multi-entry specs to ``multi``, unwrap one-entry lists for
    ``single``."""
    if spec is None:
        return Detection("unquantized")
    layer = QuarkLayer.parse(spec)
    if layer.output_or_bias:
        what = " and ".join(layer.output_or_bias)
        return Detection(None, "quark_output_or_bias_quant", {"what": what})
    w, i = layer.weight, layer.input
    if (w is not None and w.multi) or (i is not None and i.multi):
        return multi(w, i)
    return single(_unwrap(w), _unwrap(i), pack_method)


def detect_linear(spec: dict | None, pack_method: str | None = "reorder") -> Detection:
    """What vLLM builds for a Quark linear layer whose matched spec is ``spec``
    (``pack_method``: the export block's, as vLLM reads it)."""
    return _detect(spec, pack_method, _linear_multi, _linear_single)


def _linear_multi(w: QuarkSlot | None, i: QuarkSlot | None) -> Detection:
    if is_nvfp4(w, i):
        return Detection("nvfp4")
    why = "W4A8 is an MoE-only scheme" if is_fp8_w4a8(w, i) else "not NVFP4"
    return Detection(None, "quark_linear_multi_entry", {"why": why})


def _linear_single(w: Tensor, i: Tensor, pack_method: str | None) -> Detection:
    if w is not None and w.qscheme == "per_block" and not w.block:
        return Detection(None, "quark_fp8_block_size_missing")
    kind = fp8_w8a8_kind(w, i)
    if kind is not None:
        return Detection("fp8_block" if kind.startswith("block") else "fp8")
    if is_w8a8_int8(w, i):
        return Detection("int8")
    if is_w4a16_int4(w, i, pack_method):
        return Detection("w4a16_int4")
    if is_w4a8_mxfp4_fp8(w, i):
        return Detection("w4a8_mxfp4_fp8")
    if is_ocp_mx(w, i, allow_static_fp8=False):
        return Detection("ocp_mx")
    return Detection(None, "quark_linear_scheme_unsupported", {"why": _why_not(w, i)})


def detect_moe(spec: dict | None, pack_method: str | None = "reorder") -> Detection:
    """What vLLM builds for a Quark FusedMoE layer whose matched spec is ``spec``."""
    return _detect(spec, pack_method, _moe_multi, _moe_single)


def _moe_multi(w: QuarkSlot | None, i: QuarkSlot | None) -> Detection:
    if is_fp8_w4a8(w, i):
        return Detection("w4a8", "quark_moe_w4a8_rocm_only")
    if is_nvfp4(w, i):
        return Detection("nvfp4")
    why = "two-element spec is neither W4A8 nor NVFP4"
    return Detection(None, "quark_moe_scheme_unsupported", {"why": why})


def _moe_single(w: Tensor, i: Tensor, pack_method: str | None) -> Detection:
    kind = fp8_w8a8_kind(w, i)
    if kind == "block_e8m0":
        return Detection(None, "quark_moe_fp8_block_e8m0", {"key": "kFp8Static128BlockE8M0Sym"})
    if kind == "block":
        return Detection("fp8_block")
    if kind == "tensor_or_channel" and w is not None and i is not None:
        # QuarkW8A8Fp8MoEMethod.__init__: weight and input granularity must match
        iq = "per_channel" if i.qscheme == "per_channel" else "per_tensor"
        if (w.qscheme, iq) not in (("per_tensor", "per_tensor"), ("per_channel", "per_channel")):
            params = {"weight_qscheme": w.qscheme, "input_qscheme": iq}
            return Detection(None, "quark_moe_fp8_scales_unsupported", params)
        return Detection("fp8")
    if is_w4a16_int4(w, i, pack_method):
        return Detection("w4a16_int4")
    if is_ocp_mx(w, i, allow_static_fp8=True):
        return Detection("ocp_mx")
    if is_w8a8_int8(w, i):
        return Detection("int8")
    return Detection(None, "quark_moe_scheme_unsupported", {"why": _why_not(w, i)})


def _why_not(w: Tensor, i: Tensor) -> str:
    """A short reason for the common near misses (what the producer probably meant)."""
    if w is None:
        return "weight is not quantized (null) but the layer is not excluded"
    if w.dtype == "fp8_e4m3" and w.qscheme == "per_block":
        block = list(w.block or ())
        if block != [128, 128]:
            return f"FP8 per_block needs block_size [128, 128], got {block}"
        if w.symmetric is not True:
            return "FP8 per_block needs symmetric weights"
        if i is None or not i.is_dynamic:
            return "FP8 per_block needs dynamic activations"
        if i.qscheme != "per_group" or i.group_size != block[1]:
            return f"FP8 per_block needs per_group activations of group_size {block[1]}"
        return "FP8 per_block needs symmetric activations"
    if w.dtype == "fp8_e4m3" and w.qscheme in ("per_tensor", "per_channel"):
        if i is None:
            return "FP8 weights need an FP8 input spec"
        return "static FP8 activations must be per_tensor"
    if w.dtype in _OCP_MX_WEIGHT_DTYPES:
        if w.qscheme != "per_group" or w.group_size != 32:
            return "OCP MX needs per_group weights of group_size 32"
        if w.scale_format != "e8m0":
            return "OCP MX needs scale_format e8m0"
        return "OCP MX activations must be dynamic (static FP8 only on MoE layers)"
    return f"weight dtype {w.dtype} {w.qscheme} is not a scheme vLLM's Quark integration has"

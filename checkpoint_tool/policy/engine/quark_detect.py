"""vLLM's Quark scheme detection, mirrored on spec dicts (no engine code, same decisions).

``detect_linear(spec)`` follows ``QuarkConfig._get_scheme_cls_from_config`` and
``detect_moe(spec)`` follows ``QuarkMoEMethod.get_moe_method_target`` plus the method
constructors (``quark/quark.py``, ``quark/quark_moe.py``): both return a ``Detection`` whose
``scheme`` names what vLLM builds, or whose ``rule`` is the rule id of the refusal with the
parameters of its message.

Example::

    detect_moe({"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                           "scale_format": "e8m0"}, "input_tensors": None})
    # Detection(scheme='ocp_mx', rule=None, params={})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Quark dtypes whose "mx" form is in vLLM's _WEIGHT_QUANT_KEY_MAP (utils/ocp_mx_utils.py):
#: mxfp4, mxfp6_e3m2, mxfp6_e2m3 and mxfp8_e4m3 (MXFP8)
_OCP_MX_WEIGHT_DTYPES = {"fp4", "fp6_e3m2", "fp6_e2m3", "fp8_e4m3"}
#: MX dtypes that may use the 2-D per_block spelling (OCP_MX_UNPACKED_DTYPES)
_OCP_MX_UNPACKED = {"fp8_e4m3"}
_OCP_MX_INPUT_DTYPES = {"fp4", "fp6_e3m2", "fp6_e2m3", "fp8_e4m3"}


@dataclass(frozen=True)
class Detection:
    """``scheme``: what vLLM builds ("fp8", "fp8_block", "ocp_mx", "nvfp4", "int8", "w4a8",
    "w4a8_mxfp4_fp8", "w4a16_int4"); ``rule``: the rule id when vLLM refuses (or warns), with ``params``."""

    scheme: str | None
    rule: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _unwrap(v: Any) -> Any:
    if isinstance(v, list):
        return v[0] if len(v) == 1 else None
    return v


def _is_multi(w: Any, i: Any) -> bool:
    return (isinstance(w, list) and len(w) > 1) or (isinstance(i, list) and len(i) > 1)


def is_fp8_w4a8(w: Any, i: Any) -> bool:
    """fp8 per_tensor + int4 per_channel (symmetric, ch_axis 0) weights, fp8 input."""
    if isinstance(i, list):
        if len(i) != 1:
            return False
        i = i[0]
    if not isinstance(w, list) or len(w) != 2 or not isinstance(i, dict):
        return False
    w0, w1 = _d(w[0]), _d(w[1])
    ok = (
        w0.get("dtype") == "fp8_e4m3"
        and w1.get("dtype") == "int4"
        and i.get("dtype") == "fp8_e4m3"
        and not w0.get("is_dynamic")
        and not w1.get("is_dynamic")
        and w0.get("qscheme") == "per_tensor"
        and w1.get("qscheme") == "per_channel"
        and w1.get("symmetric") is True
        and w1.get("ch_axis") == 0
    )
    return ok and (bool(i.get("is_dynamic")) or i.get("qscheme") == "per_tensor")


def is_nvfp4(w: Any, i: Any) -> bool:
    """[fp4 per_group 16, fp8 per_tensor] for both weight and input (input fp4 dynamic)."""
    if not (isinstance(w, list) and len(w) == 2 and isinstance(i, list) and len(i) == 2):
        return False
    w0, w1, i0, i1 = _d(w[0]), _d(w[1]), _d(i[0]), _d(i[1])
    fp4_group = {"dtype": "fp4", "qscheme": "per_group", "group_size": 16}
    return (
        all(w0.get(k) == v for k, v in fp4_group.items())
        and not w0.get("is_dynamic")
        and all(i0.get(k) == v for k, v in fp4_group.items())
        and bool(i0.get("is_dynamic"))
        and w1.get("dtype") == "fp8_e4m3"
        and w1.get("qscheme") == "per_tensor"
        and not w1.get("is_dynamic")
        and i1.get("dtype") == "fp8_e4m3"
        and i1.get("qscheme") == "per_tensor"
        and not i1.get("is_dynamic")
    )


def fp8_w8a8_kind(w: Any, i: Any) -> str | None:
    """ "block" / "block_e8m0" / "tensor_or_channel" when vLLM's ``_is_fp8_w8a8`` matches."""
    if not isinstance(w, dict) or not isinstance(i, dict):
        return None
    if w.get("dtype") != "fp8_e4m3" or i.get("dtype") != "fp8_e4m3" or w.get("is_dynamic"):
        return None
    block = list(w.get("block_size") or [])
    if w.get("qscheme") == "per_block" and block == [128, 128] and w.get("symmetric") is True:
        dyn_group = (
            bool(i.get("is_dynamic"))
            and i.get("qscheme") == "per_group"
            and i.get("group_size") == block[1]
            and i.get("symmetric") is True
        )
        if not dyn_group:
            return None
        return "block_e8m0" if w.get("scale_type") == "float8_e8m0fnu" else "block"
    if w.get("qscheme") not in ("per_tensor", "per_channel"):
        return None
    if i.get("is_dynamic") or i.get("qscheme") == "per_tensor":
        return "tensor_or_channel"
    return None


def is_w8a8_int8(w: Any, i: Any) -> bool:
    if not isinstance(w, dict) or not isinstance(i, dict):
        return False
    static_in = i.get("qscheme") == "per_tensor" and not i.get("is_dynamic")
    dynamic_in = i.get("qscheme") == "per_channel" and i.get("is_dynamic") is True
    return (
        w.get("dtype") == "int8"
        and i.get("dtype") == "int8"
        and w.get("qscheme") in ("per_tensor", "per_channel")
        and w.get("symmetric") is True
        and ((static_in and not w.get("is_dynamic")) or dynamic_in)
    )


def is_w4a8_mxfp4_fp8(w: Any, i: Any) -> bool:
    if not isinstance(w, dict) or not isinstance(i, dict):
        return False
    return (
        w.get("dtype") == "fp4"
        and w.get("qscheme") == "per_group"
        and w.get("group_size") == 32
        and w.get("scale_format") == "e8m0"
        and not w.get("is_dynamic")
        and i.get("dtype") == "fp8_e4m3"
        and i.get("qscheme") == "per_tensor"
        and not i.get("is_dynamic")
        and i.get("symmetric") is True
    )


def ocp_mx_weight(w: Any) -> bool:
    """vLLM's ``ocp_mx_weight_dtype_and_rows`` is not None: an OCP MX weight spec, spelled 1-D
    (per_group 32, scale_format e8m0) or, for MXFP8, 2-D (per_block [R, 32], scale_type
    float8_e8m0fnu, symmetric, static)."""
    if not isinstance(w, dict) or w.get("dtype") not in _OCP_MX_WEIGHT_DTYPES:
        return False
    if w.get("qscheme") == "per_group":
        return w.get("group_size") == 32 and w.get("scale_format") == "e8m0"
    if w.get("qscheme") == "per_block" and w.get("dtype") in _OCP_MX_UNPACKED:
        block = list(w.get("block_size") or [])
        return (
            len(block) == 2
            and block[1] == 32
            and w.get("scale_type") == "float8_e8m0fnu"
            and w.get("symmetric") is True
            and not w.get("is_dynamic")
        )
    return False


def is_ocp_mx(w: Any, i: Any, *, allow_static_fp8: bool) -> bool:
    """``QuarkConfig._is_w_ocp_mx_a_x``: an OCP MX weight (MXFP4/6/8); activations: none,
    dynamic MX/FP8, or (MoE only) static symmetric per-tensor FP8."""
    if not ocp_mx_weight(w):
        return False
    if i is None:
        return True
    if not isinstance(i, dict):
        return False
    if not i.get("is_dynamic"):
        return (
            allow_static_fp8
            and i.get("dtype") == "fp8_e4m3"
            and i.get("qscheme") == "per_tensor"
            and i.get("symmetric") is True
        )
    return i.get("dtype") in _OCP_MX_INPUT_DTYPES


def is_w4a16_int4(w: Any, i: Any, pack_method: str | None) -> bool:
    """``QuarkConfig._is_w4a16_int4``: int4/uint4 weights, no input quantization, and the
    export packed them (``pack_method`` order / reorder; absent means None, not packed)."""
    return (
        isinstance(w, dict)
        and i is None
        and w.get("dtype") in ("int4", "uint4")
        and pack_method in ("order", "reorder")
    )


def _short(t: Any) -> str:
    """Compact text of a tensor spec, e.g. ``fp8_e4m3/per_block[128, 128]/static``."""
    if t is None:
        return "none"
    if isinstance(t, list):
        return "[" + ", ".join(_short(x) for x in t) + "]"
    t = _d(t)
    bits = [str(t.get("dtype")), str(t.get("qscheme"))]
    if t.get("group_size"):
        bits[-1] += f" {t.get('group_size')}"
    if t.get("block_size"):
        bits[-1] += f" {list(t.get('block_size'))}"
    bits.append("dynamic" if t.get("is_dynamic") else "static")
    return "/".join(bits)


def spec_text(spec: dict) -> str:
    """``weight fp4/per_group 32/static, input fp4/per_group 32/dynamic``."""
    return f"weight {_short(spec.get('weight'))}, input {_short(spec.get('input_tensors'))}"


def _output_or_bias(spec: dict) -> Detection | None:
    what = [k for k in ("output_tensors", "bias") if spec.get(k)]
    if what:
        return Detection(None, "quark_output_or_bias_quant", {"what": " and ".join(what)})
    return None


def detect_linear(spec: dict | None, pack_method: str | None = "reorder") -> Detection:
    """What vLLM builds for a Quark linear layer whose matched spec is ``spec``
    (``pack_method``: the export block's, as vLLM reads it)."""
    if spec is None:
        return Detection("unquantized")
    refused = _output_or_bias(spec)
    if refused:
        return refused
    w, i = spec.get("weight"), spec.get("input_tensors")
    if _is_multi(w, i):
        if is_nvfp4(w, i):
            return Detection("nvfp4")
        why = "W4A8 is an MoE-only scheme" if is_fp8_w4a8(w, i) else "not NVFP4"
        return Detection(None, "quark_linear_multi_entry", {"why": why})
    w, i = _unwrap(w), _unwrap(i)
    if isinstance(w, dict) and w.get("qscheme") == "per_block" and not w.get("block_size"):
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
    if spec is None:
        return Detection("unquantized")
    refused = _output_or_bias(spec)
    if refused:
        return refused
    w, i = spec.get("weight"), spec.get("input_tensors")
    if _is_multi(w, i):
        if is_fp8_w4a8(w, i):
            return Detection("w4a8", "quark_moe_w4a8_rocm_only")
        if is_nvfp4(w, i):
            return Detection("nvfp4")
        return Detection(
            None,
            "quark_moe_scheme_unsupported",
            {"why": "two-element spec is neither W4A8 nor NVFP4"},
        )
    w, i = _unwrap(w), _unwrap(i)
    kind = fp8_w8a8_kind(w, i)
    if kind == "block_e8m0":
        return Detection(None, "quark_moe_fp8_block_e8m0", {"key": "kFp8Static128BlockE8M0Sym"})
    if kind == "block":
        return Detection("fp8_block")
    if kind == "tensor_or_channel":
        wq = _d(w).get("qscheme")
        iq = "per_channel" if _d(i).get("qscheme") == "per_channel" else "per_tensor"
        if (wq, iq) not in (("per_tensor", "per_tensor"), ("per_channel", "per_channel")):
            params = {"weight_qscheme": wq, "input_qscheme": iq}
            return Detection(None, "quark_moe_fp8_scales_unsupported", params)
        return Detection("fp8")
    if is_w4a16_int4(w, i, pack_method):
        return Detection("w4a16_int4")
    if is_ocp_mx(w, i, allow_static_fp8=True):
        return Detection("ocp_mx")
    if is_w8a8_int8(w, i):
        return Detection("int8")
    return Detection(None, "quark_moe_scheme_unsupported", {"why": _why_not(w, i)})


def _why_not(w: Any, i: Any) -> str:
    """A short reason for the common near misses (what the producer probably meant)."""
    w, i = _d(w), _d(i) if isinstance(i, dict) else None
    if not w:
        return "weight is not quantized (null) but the layer is not excluded"
    if w.get("dtype") == "fp8_e4m3" and w.get("qscheme") == "per_block":
        block = list(w.get("block_size") or [])
        if block != [128, 128]:
            return f"FP8 per_block needs block_size [128, 128], got {block}"
        if w.get("symmetric") is not True:
            return "FP8 per_block needs symmetric weights"
        if i is None or not i.get("is_dynamic"):
            return "FP8 per_block needs dynamic activations"
        if i.get("qscheme") != "per_group" or i.get("group_size") != block[1]:
            return f"FP8 per_block needs per_group activations of group_size {block[1]}"
        return "FP8 per_block needs symmetric activations"
    if w.get("dtype") == "fp8_e4m3" and w.get("qscheme") in ("per_tensor", "per_channel"):
        if i is None:
            return "FP8 weights need an FP8 input spec"
        return "static FP8 activations must be per_tensor"
    if w.get("dtype") in _OCP_MX_WEIGHT_DTYPES:
        if w.get("qscheme") != "per_group" or w.get("group_size") != 32:
            return "OCP MX needs per_group weights of group_size 32"
        if w.get("scale_format") != "e8m0":
            return "OCP MX needs scale_format e8m0"
        return "OCP MX activations must be dynamic (static FP8 only on MoE layers)"
    return f"weight dtype {w.get('dtype')} {w.get('qscheme')} is not a scheme vLLM's Quark integration has"

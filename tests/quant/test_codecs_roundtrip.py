"""Quantize -> dequantize against float64 reference quantizers written here, independently.

References work in numpy float64 and round with ml_dtypes (clip first: the formats saturate).
MX scales are powers of two, so MX results must match the reference exactly; float-scaled
formats (FP8 tensor/channel/block, NVFP4) divide in float32 in the codec, so the codes may
differ from the reference only where the float64 quotient sits on a rounding tie. Every
element error must also stay within half a grid step of the scaled format (saturation aside).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0
from checkpoint_tool.quant.codecs.fp4 import decode_fp4
from checkpoint_tool.quant.scheme import WeightFormat as F

FP4_MAX, E4M3_MAX = 6.0, 448.0

# ---- float64 reference -------------------------------------------------------------------


def rne_fp4(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -FP4_MAX, FP4_MAX).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)


def rne_e4m3(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def half_step_fp4(v: np.ndarray) -> np.ndarray:
    """Largest rounding error of an in-range E2M1 value (grid 0.5 / 1 / 2 apart)."""
    a = np.abs(v)
    return np.where(a < 2, 0.25, np.where(a < 4, 0.5, 1.0)) + np.maximum(a - FP4_MAX, 0)


def half_step_e4m3(v: np.ndarray) -> np.ndarray:
    """Half the E4M3 spacing at |v| (subnormal spacing 2**-9, 3 mantissa bits above 2**-6)."""
    a = np.abs(v)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.maximum(a, 2.0**-6)))
    return 2.0 ** (e - 4) + np.maximum(a - E4M3_MAX, 0)


def floor_log2(a: np.ndarray) -> np.ndarray:
    mant, exp = np.frexp(a)  # a = mant * 2**exp, mant in [0.5, 1)
    return exp - 1, mant * 2  # floor(log2 a), mantissa in [1, 2)


def ref_mx_exponent(amax: np.ndarray, *, mbits: int, emax: int, mode: str) -> np.ndarray:
    """OCP floor(log2(amax)) - emax; "even" first rounds amax half-up to ``mbits`` bits."""
    e, m = floor_log2(amax)
    if mode == "even":
        e = e + (m >= 2 - 2.0 ** -(mbits + 1))  # 1.75 for FP4, 1.9375 for E4M3
    e = np.where(amax > 0, e, -1000)
    return np.clip(e - emax, -127, 127)


def groups_of(x: np.ndarray, g: int) -> np.ndarray:
    n = x.shape[-1]
    ng = -(-n // g)
    xp = np.concatenate([x, np.zeros((*x.shape[:-1], ng * g - n))], axis=-1)
    return xp.reshape(*x.shape[:-1], ng, g)


def per_element(s: np.ndarray, g: int, n: int) -> np.ndarray:
    return np.repeat(s, g, axis=-1)[..., :n]


def ref_mx(x: np.ndarray, *, elem: str, group: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    mbits, emax, rne = (1, 2, rne_fp4) if elem == "fp4" else (3, 8, rne_e4m3)
    k = ref_mx_exponent(np.abs(groups_of(x, group)).max(-1), mbits=mbits, emax=emax, mode=mode)
    s = per_element(2.0**k, group, x.shape[-1])
    return rne(x / s) * s, k


def near_tie(v: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """True where ``v`` (scaled) is within float32 rounding of the midpoint of ``a`` and ``b``."""
    return np.abs(v - (a + b) / 2) <= 1e-6 * np.maximum(np.abs(v), 1e-30)


# ---- data ----------------------------------------------------------------------------------


def make_weight(seed: int, shape: tuple[int, ...], exp: int, outliers: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * 2.0**exp
    if outliers:
        mask = torch.rand(shape, generator=g) < 0.01
        w = torch.where(mask, w * 37.0, w)
    w = torch.where(w == 0, torch.full_like(w, 2.0**exp), w)  # never exact zeros
    return w.to(torch.bfloat16).to(torch.float32)  # weights come as BF16


weights = st.builds(
    make_weight,
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from([(3, 64), (2, 5, 96), (17, 32), (1, 160)]),
    exp=st.integers(-16, 12),
    outliers=st.booleans(),
)

SETTINGS = settings(max_examples=25, deadline=None)


# ---- MX: exact --------------------------------------------------------------------------------


@SETTINGS
@given(w=weights, mode=st.sampled_from(["even", "floor"]))
def test_mxfp4_matches_reference_exactly(w, mode):
    codec = codec_for_format(F.MXFP4, scale_mode=mode)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    want, k = ref_mx(x, elem="fp4", group=32, mode=mode)
    assert parts["weight"].dtype == torch.uint8 and parts["scale"].dtype == torch.uint8
    assert np.array_equal(parts["scale"].numpy().astype(np.int64), k + 127)
    got = codec.dequantize(parts).numpy().astype(np.float64)
    assert np.array_equal(got, want)
    s = per_element(2.0**k, 32, x.shape[-1])
    assert np.all(np.abs(got - x) <= half_step_fp4(x / s) * s)


@SETTINGS
@given(w=weights, mode=st.sampled_from(["even", "floor"]))
def test_mxfp8_matches_reference_exactly(w, mode):
    codec = codec_for_format(F.MXFP8, scale_mode=mode)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    want, k = ref_mx(x, elem="e4m3", group=32, mode=mode)
    assert parts["weight"].dtype == torch.float8_e4m3fn
    assert np.array_equal(parts["scale"].numpy().astype(np.int64), k + 127)
    got = codec.dequantize(parts).numpy().astype(np.float64)
    assert np.array_equal(got, want)
    s = per_element(2.0**k, 32, x.shape[-1])
    assert np.all(np.abs(got - x) <= half_step_e4m3(x / s) * s)


def test_mxfp4_even_rule_boundary_is_seven_times_the_binade():
    # group max 6.99 keeps scale 2**0 (saturates to 6); 7.0 moves to 2**1 (Quark "even");
    # OCP floor keeps 2**0 for both.
    w = torch.full((2, 32), 0.5)
    w[0, 0], w[1, 0] = 6.99, 7.0
    even = codec_for_format(F.MXFP4).quantize(w)["scale"][:, 0].tolist()
    floor = codec_for_format(F.MXFP4, scale_mode="floor").quantize(w)["scale"][:, 0].tolist()
    assert even == [127, 128] and floor == [127, 127]


def test_mx_scale_f8_e8m0_storage():
    w = make_weight(1, (4, 64), 0, False)
    parts = codec_for_format(F.MXFP4, scale_dtype="F8_E8M0").quantize(w)
    assert parts["scale"].dtype == torch.float8_e8m0fnu
    as_u8 = {"weight": parts["weight"], "scale": parts["scale"].view(torch.uint8)}
    codec = codec_for_format(F.MXFP4)
    assert torch.equal(codec.dequantize(parts), codec.dequantize(as_u8))


def test_e8m0_255_scale_decodes_to_nan_in_its_group_only():
    codec = codec_for_format(F.MXFP4)
    parts = codec.quantize(make_weight(2, (2, 64), 0, False))
    parts["scale"][1, 0] = 255
    out = codec.dequantize(parts)
    nonzero = codec.dequantize({"weight": parts["weight"], "scale": parts["scale"]}) != 0
    assert torch.isnan(out[1, :32][nonzero[1, :32]]).all()
    assert not torch.isnan(out[0]).any() and not torch.isnan(out[1, 32:]).any()
    assert decode_e8m0(torch.tensor([255], dtype=torch.uint8)).isnan().all()


# ---- float-scaled FP8 ------------------------------------------------------------------------


def check_elements(codes: np.ndarray, x: np.ndarray, s: np.ndarray, *, elem: str) -> None:
    """Stored element values ``codes`` vs reference rounding of ``x / s`` (``s`` per element).

    The codec divides in float32, so codes may differ from the float64 reference only on a tie.
    """
    rne, half_step = (rne_fp4, half_step_fp4) if elem == "fp4" else (rne_e4m3, half_step_e4m3)
    v = x / s
    want = rne(v)
    assert not np.any((codes != want) & ~near_tie(v, codes, want)), "codes differ away from a tie"
    assert np.all(np.abs(codes * s - x) <= half_step(v) * s * (1 + 1e-6))


def check_dequant(got: np.ndarray, codes: np.ndarray, s: np.ndarray) -> None:
    """Dequantized float32 = stored value * scale, up to one float32 rounding."""
    assert np.allclose(got, codes * s, rtol=2.0**-23, atol=0)


def fp8_codes(parts: dict[str, torch.Tensor]) -> np.ndarray:
    return parts["weight"].to(torch.float64).numpy()


@SETTINGS
@given(w=weights, scale_dtype=st.sampled_from(["F32", "BF16"]))
def test_fp8_per_tensor(w, scale_dtype):
    codec = codec_for_format(F.FP8_PER_TENSOR, scale_dtype=scale_dtype)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    amax = np.abs(x).max(axis=(-2, -1))
    s = parts["scale"].to(torch.float64).numpy()
    assert s.shape == x.shape[:-2]
    rel = 2.0**-23 if scale_dtype == "F32" else 2.0**-8
    assert np.allclose(s, amax / E4M3_MAX, rtol=rel, atol=0)
    se = np.broadcast_to(s[..., None, None], x.shape)
    check_elements(fp8_codes(parts), x, se, elem="e4m3")
    check_dequant(codec.dequantize(parts).numpy().astype(np.float64), fp8_codes(parts), se)


@SETTINGS
@given(w=weights, scale_dtype=st.sampled_from(["F32", "BF16"]))
def test_fp8_per_channel(w, scale_dtype):
    codec = codec_for_format(F.FP8_PER_CHANNEL, scale_dtype=scale_dtype)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    s = parts["scale"].to(torch.float64).numpy()
    rel = 2.0**-23 if scale_dtype == "F32" else 2.0**-8
    assert np.allclose(s, np.abs(x).max(-1) / E4M3_MAX, rtol=rel, atol=0)
    se = np.broadcast_to(s[..., None], x.shape)
    check_elements(fp8_codes(parts), x, se, elem="e4m3")
    check_dequant(codec.dequantize(parts).numpy().astype(np.float64), fp8_codes(parts), se)


def block_amax(x: np.ndarray, b0: int, b1: int) -> np.ndarray:
    rows, cols = x.shape[-2:]
    out = np.zeros((*x.shape[:-2], -(-rows // b0), -(-cols // b1)))
    for i in range(out.shape[-2]):
        for j in range(out.shape[-1]):
            out[..., i, j] = np.abs(x[..., i * b0 : (i + 1) * b0, j * b1 : (j + 1) * b1]).max(
                (-2, -1)
            )
    return out


def block_expand(s: np.ndarray, b0: int, b1: int, rows: int, cols: int) -> np.ndarray:
    return np.repeat(np.repeat(s, b0, axis=-2), b1, axis=-1)[..., :rows, :cols]


@SETTINGS
@given(w=weights, block=st.sampled_from([(128, 128), (8, 16), (3, 32)]))
def test_fp8_block_f32_ceil_shaped(w, block):
    codec = codec_for_format(F.FP8_BLOCK, block=block)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    amax = block_amax(x, *block)
    s = parts["scale"].numpy().astype(np.float64)
    assert s.shape == amax.shape  # ceil(out/b0), ceil(in/b1)
    assert np.allclose(s, amax / E4M3_MAX, rtol=2.0**-23, atol=0)
    se = block_expand(s, *block, *x.shape[-2:])
    check_elements(fp8_codes(parts), x, se, elem="e4m3")
    check_dequant(codec.dequantize(parts).numpy().astype(np.float64), fp8_codes(parts), se)


@SETTINGS
@given(w=weights, scale_dtype=st.sampled_from(["F32", "U8", "F8_E8M0"]))
def test_fp8_block_ue8m0_scales_are_ceil_powers_of_two(w, scale_dtype):
    block = (8, 16)
    codec = codec_for_format(F.FP8_BLOCK, block=block, scale_dtype=scale_dtype, scale_is_e8m0=True)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    amax = block_amax(x, *block)
    want = np.array([2.0 ** math.ceil(math.log2(a / E4M3_MAX)) for a in amax.reshape(-1)])
    sc = parts["scale"]
    s = (decode_e8m0(sc) if scale_dtype != "F32" else sc).numpy().astype(np.float64)
    assert np.array_equal(s.reshape(-1), want)
    se = block_expand(s, *block, *x.shape[-2:])
    got = codec.dequantize(parts).numpy().astype(np.float64)
    assert np.array_equal(got, rne_e4m3(x / se) * se)  # power-of-two scales: exact
    assert np.all(np.abs(x / se) <= E4M3_MAX)  # ceil never saturates


# ---- NVFP4 ------------------------------------------------------------------------------------


@SETTINGS
@given(w=weights)
def test_nvfp4_two_level_scales(w):
    codec = codec_for_format(F.NVFP4)
    parts = codec.quantize(w)
    x = w.numpy().astype(np.float64)
    g = parts["global_scale"].numpy().astype(np.float64)
    assert parts["global_scale"].dtype == torch.float32 and g.shape == x.shape[:-2]
    assert np.allclose(g, np.abs(x).max((-2, -1)) / (FP4_MAX * E4M3_MAX), rtol=2.0**-22, atol=0)
    # group scales: E4M3 rounding of group_amax / 6 / global, within half an E4M3 step
    target = np.abs(groups_of(x, 16)).max(-1) / FP4_MAX / g[..., None, None]
    sd = parts["scale"].to(torch.float64).numpy()
    assert parts["scale"].dtype == torch.float8_e4m3fn
    assert np.all(np.abs(sd - target) <= half_step_e4m3(target) * (1 + 1e-6))
    # elements: RNE of x / (scale * global), ties aside
    eff = per_element(sd, 16, x.shape[-1]) * g[..., None, None]
    codes = decode_fp4(parts["weight"]).numpy().astype(np.float64)
    check_elements(codes, x, eff, elem="fp4")
    check_dequant(codec.dequantize(parts).numpy().astype(np.float64), codes, eff)


# ---- all formats -----------------------------------------------------------------------------

ALL = [F.UNQUANTIZED, F.FP8_PER_TENSOR, F.FP8_PER_CHANNEL, F.FP8_BLOCK, F.MXFP4, F.NVFP4, F.MXFP8]


@pytest.mark.parametrize("fmt", ALL)
def test_storage_shapes_and_logical_shape_match_quantize(fmt):
    codec = codec_for_format(fmt)
    w = make_weight(3, (2, 130, 96), 0, False)
    parts = codec.quantize(w)
    want = codec.storage_shapes(tuple(w.shape))
    assert {r: tuple(t.shape) for r, t in parts.items()} == want
    assert codec.logical_shape(parts) == tuple(w.shape)
    assert codec.logical_shape({r: tuple(t.shape) for r, t in parts.items()}) == tuple(w.shape)
    assert codec.check_parts(parts) == tuple(w.shape)


@pytest.mark.parametrize("fmt", ALL[1:])
def test_zero_weight_roundtrips_to_zero(fmt):
    codec = codec_for_format(fmt)
    out = codec.dequantize(codec.quantize(torch.zeros(4, 64)))
    assert torch.equal(out, torch.zeros(4, 64))


@pytest.mark.parametrize("fmt", ALL[1:])
def test_nan_weight_refused(fmt):
    w = make_weight(4, (4, 64), 0, False)
    w[1, 3] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        codec_for_format(fmt).quantize(w)


@pytest.mark.parametrize("fmt", ALL[1:])
def test_missing_or_misshapen_scale_is_one_clear_error(fmt):
    codec = codec_for_format(fmt)
    parts = codec.quantize(make_weight(5, (4, 64), 0, False))
    with pytest.raises(InputError, match="missing"):
        codec.dequantize({"weight": parts["weight"]})
    bad = dict(parts, scale=torch.cat([parts["scale"].reshape(-1)] * 2).reshape(-1, 1, 1))
    with pytest.raises(InputError, match="expected"):
        codec.dequantize(bad)


def test_fp8_per_channel_accepts_out_by_1_scale():
    codec = codec_for_format(F.FP8_PER_CHANNEL)
    parts = codec.quantize(make_weight(6, (8, 32), 0, False))
    col = dict(parts, scale=parts["scale"][:, None])
    assert torch.equal(codec.dequantize(col), codec.dequantize(parts))


@pytest.mark.parametrize("shape", [(8, 32), (3, 8, 32)])
def test_fp8_per_tensor_accepts_a_trailing_1_on_the_scale(shape):
    """``[1]`` for one matrix, ``[E, 1]`` for experts: the same values, the same weights."""
    codec = codec_for_format(F.FP8_PER_TENSOR)
    parts = codec.quantize(make_weight(8, shape, 0, False))
    spelled = dict(parts, scale=parts["scale"][..., None])
    out = codec.dequantize(spelled)
    assert out.shape == shape
    assert torch.equal(out, codec.dequantize(parts))


def test_fp4_weight_stored_as_int8_decodes_the_same():
    codec = codec_for_format(F.NVFP4)
    parts = codec.quantize(make_weight(7, (4, 64), 0, False))
    as_i8 = dict(parts, weight=parts["weight"].view(torch.int8))
    assert torch.equal(codec.dequantize(as_i8), codec.dequantize(parts))

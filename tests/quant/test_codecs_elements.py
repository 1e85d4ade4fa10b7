"""Element codecs (FP4 E2M1, FP8 E4M3FN, E8M0) against ml_dtypes, an independent reference.

ml_dtypes types are unpacked (one code per byte), so references are built code by code.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0, e8m0_bytes, encode_e8m0
from checkpoint_tool.quant.codecs.fp4 import (
    FP4_E2M1_VALUES,
    decode_fp4,
    encode_fp4,
    pack_fp4,
    unpack_fp4,
)
from checkpoint_tool.quant.codecs.fp8 import decode_fp8_e4m3, encode_fp8_e4m3

ALL_BYTES = np.arange(256, dtype=np.uint8)


def ref_fp4(codes: np.ndarray) -> np.ndarray:
    """Value of each 4-bit code per ml_dtypes (one code per byte, low bits)."""
    return codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)


def assert_same_floats(got: torch.Tensor, want: np.ndarray) -> None:
    g = got.numpy().astype(np.float64)
    assert g.shape == want.shape
    assert np.array_equal(np.isnan(g), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(g[ok], want[ok])
    assert np.array_equal(np.signbit(g[ok]), np.signbit(want[ok]))  # -0.0 stays -0.0


def test_fp4_value_table_matches_ml_dtypes():
    assert_same_floats(FP4_E2M1_VALUES, ref_fp4(np.arange(16)))


def test_fp4_decode_every_byte_low_nibble_first():
    got = decode_fp4(torch.from_numpy(ALL_BYTES.copy()))  # 256 bytes -> 512 values
    want = np.stack([ref_fp4(ALL_BYTES & 0x0F), ref_fp4(ALL_BYTES >> 4)], axis=-1).reshape(-1)
    assert_same_floats(got, want)


def test_fp4_nibble_order_hand_computed_byte():
    # 0.5 is code 0b0001; -3.0 is sign 1, 3.0 = 1.5 * 2**1 -> exp 2, mantissa 1 -> 0b1101.
    # Element 0 goes in the low nibble, element 1 in the high nibble: 0xD1.
    packed = pack_fp4(encode_fp4(torch.tensor([0.5, -3.0])))
    assert packed.tolist() == [0xD1]
    assert decode_fp4(torch.tensor([0xD1], dtype=torch.uint8)).tolist() == [0.5, -3.0]


def test_fp4_int8_storage_is_reinterpreted():
    raw = torch.from_numpy(ALL_BYTES.copy())
    assert_same_floats(decode_fp4(raw.view(torch.int8)), decode_fp4(raw).numpy().astype(np.float64))
    assert torch.equal(unpack_fp4(raw.view(torch.int8)), unpack_fp4(raw))
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert torch.equal(unpack_fp4(raw.view(torch.float4_e2m1fn_x2)), unpack_fp4(raw))


def test_fp4_non_byte_storage_refused():
    with pytest.raises(InputError, match="U8/I8/F4"):
        decode_fp4(torch.zeros(4, dtype=torch.float32))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), exp=st.integers(-4, 4))
def test_fp4_encode_is_rne_saturating_like_ml_dtypes(seed, exp):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, generator=g) * 2.0**exp
    # add exact ties and out-of-range values on purpose
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5, 100.0])
    x = torch.cat([x, ties, -ties])
    want = np.clip(x.numpy().astype(np.float64), -6, 6).astype(ml_dtypes.float4_e2m1fn)
    codes = encode_fp4(x)
    assert_same_floats(FP4_E2M1_VALUES[codes.long()], want.astype(np.float64))
    # pack/unpack round trip
    assert torch.equal(unpack_fp4(pack_fp4(codes)), codes)


def test_fp8_decode_every_byte_matches_ml_dtypes():
    want = ALL_BYTES.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    raw = torch.from_numpy(ALL_BYTES.copy())
    assert_same_floats(decode_fp8_e4m3(raw), want)
    assert_same_floats(decode_fp8_e4m3(raw.view(torch.float8_e4m3fn)), want)
    assert_same_floats(decode_fp8_e4m3(raw.view(torch.int8)), want)
    assert np.isnan(want[0x7F]) and np.isnan(want[0xFF])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), exp=st.integers(-12, 10))
def test_fp8_encode_is_rne_saturating_never_nan(seed, exp):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1024, generator=g) * 2.0**exp
    # exact ties between E4M3 neighbours (e.g. 1.0625 between 1.0 and 1.125), subnormal ties,
    # overflow and infinities
    specials = torch.tensor([1.0625, 1.1875, 2**-10, 3 * 2**-10, 464.0, 480.0, 1e6, float("inf")])
    x = torch.cat([x, specials, -specials])
    want = np.clip(x.numpy().astype(np.float64), -448, 448).astype(ml_dtypes.float8_e4m3fn)
    got = encode_fp8_e4m3(x)
    assert got.dtype == torch.float8_e4m3fn
    assert_same_floats(got.to(torch.float32), want.astype(np.float64))
    assert not torch.isnan(got.to(torch.float32)).any()


def test_fp8_encode_nan_becomes_zero_not_nan():
    got = encode_fp8_e4m3(torch.tensor([float("nan"), 1.0]))
    assert got.to(torch.float32).tolist() == [0.0, 1.0]


def test_e8m0_decode_every_byte_matches_ml_dtypes():
    want = ALL_BYTES.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    raw = torch.from_numpy(ALL_BYTES.copy())
    for stored in (raw, raw.view(torch.float8_e8m0fnu), raw.view(torch.int8)):
        assert_same_floats(decode_e8m0(stored), want)
    assert np.isnan(decode_e8m0(torch.tensor([255], dtype=torch.uint8)).item())
    assert decode_e8m0(torch.tensor([0], dtype=torch.uint8)).item() == 2.0**-127


def test_e8m0_bytes_reinterprets_never_casts():
    raw = torch.tensor([0, 127, 254, 255], dtype=torch.uint8)
    assert torch.equal(e8m0_bytes(raw.view(torch.float8_e8m0fnu)), raw)
    with pytest.raises(InputError, match="E8M0"):
        e8m0_bytes(torch.ones(2, dtype=torch.float32))


def test_e8m0_encode_saturates_to_finite_range():
    got = encode_e8m0(torch.tensor([-200, -127, 0, 5, 127, 300]))
    assert got.tolist() == [0, 0, 127, 132, 254, 254]

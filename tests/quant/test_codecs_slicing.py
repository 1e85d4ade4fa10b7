"""Slicing and padding quantized weights: exact in the dequantized domain, refused when
misaligned, and the plan-level ops (storage_regions / storage_pads) equal the tensor ops."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.plan.model import Pad, Region
from checkpoint_tool.quant.codecs import (
    Fp8BlockCodec,
    Fp8ChannelCodec,
    Fp8TensorCodec,
    MxFp4Codec,
    MxFp8Codec,
    NvFp4Codec,
    UnquantizedCodec,
    apply_pad,
    apply_region,
    codec_for_format,
    get_codec,
)
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.scheme import WeightFormat as F

# (codec, logical shape, granularity of out rows, granularity of in cols) -- small blocks keep
# the shapes small; rows 40 / cols 96 leave partial FP8 blocks on both dims.
CASES = {
    "unquantized": (UnquantizedCodec("BF16"), (2, 40, 96), 1, 1),
    "fp8_tensor": (Fp8TensorCodec("BF16"), (2, 40, 96), 1, 1),
    "fp8_channel": (Fp8ChannelCodec(), (2, 40, 96), 1, 1),
    "fp8_block": (Fp8BlockCodec((16, 32)), (2, 40, 96 + 8), 16, 32),
    "fp8_block_ue8m0_u8": (Fp8BlockCodec((16, 32), "U8", e8m0=True), (2, 40, 96), 16, 32),
    "mxfp4": (MxFp4Codec(), (2, 40, 96), 1, 32),
    "nvfp4": (NvFp4Codec(), (2, 40, 96), 1, 16),
    "mxfp8": (MxFp8Codec(), (2, 40, 96), 1, 32),
}


def weight(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = (
        torch.randn(shape, generator=g)
        * torch.exp2(torch.randint(-6, 6, shape[:-1], generator=g))[..., None]
    )
    return torch.where(w == 0, torch.ones_like(w), w)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and storage bytes (torch.equal lacks float8 support)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.reshape(-1).contiguous().view(torch.uint8),
            b.reshape(-1).contiguous().view(torch.uint8),
        )
    )


def aligned_range(data, n: int, unit: int) -> tuple[int, int]:
    """A [start, stop) whose ends are multiples of ``unit`` (stop may be the full size)."""
    marks = sorted({*range(0, n + 1, unit), n})
    i = data.draw(st.integers(0, len(marks) - 2))
    j = data.draw(st.integers(i + 1, len(marks) - 1))
    return marks[i], marks[j]


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_slice_commutes_with_dequantize(case, seed, data):
    codec, shape, row_unit, col_unit = CASES[case]
    parts = codec.quantize(weight(seed, shape))
    full = codec.dequantize(parts)
    dim = data.draw(st.sampled_from([0, 1, 2, -1, -2]))
    unit = {0: 1, 1: row_unit, 2: col_unit}[dim % 3]
    start, stop = aligned_range(data, shape[dim], unit)
    sliced = codec.slice(parts, dim, start, stop)
    assert torch.equal(codec.dequantize(sliced), full.narrow(dim, start, stop - start))
    # the plan-level regions applied with apply_region give the same storage tensors
    regions = codec.storage_regions(shape, dim, start, stop)
    for role, t in parts.items():
        r = regions[role]
        assert same_bytes(apply_region(t, r) if r is not None else t, sliced[role])


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(sorted(CASES)), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_pad_commutes_with_dequantize_with_zeros(case, seed, data):
    codec, shape, _, _ = CASES[case]
    parts = codec.quantize(weight(seed, shape))
    full = codec.dequantize(parts)
    dim = data.draw(st.sampled_from([0, 1, 2, -2, -1]))
    step = codec.weight_pack if dim % 3 == 2 else 1  # FP4 pads whole bytes
    amount = step * data.draw(st.integers(1, 40))
    padded = codec.pad(parts, dim, amount)
    zeros_shape = list(shape)
    zeros_shape[dim] = amount
    want = torch.cat([full, torch.zeros(zeros_shape)], dim=dim)
    assert torch.equal(codec.dequantize(padded), want)
    assert codec.logical_shape(padded) == tuple(want.shape)
    pads = codec.storage_pads(shape, dim, amount)
    for role, t in parts.items():
        p = pads[role]
        assert same_bytes(apply_pad(t, p) if p is not None else t, padded[role])


@pytest.mark.parametrize(
    ("case", "dim", "start", "stop", "multiple"),
    [
        ("mxfp4", -1, 16, 64, 32),  # inside a scale group
        ("mxfp4", -1, 32, 63, 32),  # odd stop would split a byte
        ("nvfp4", -1, 8, 32, 16),
        ("mxfp8", 2, 0, 48, 32),
        ("fp8_block", -2, 8, 32, 16),  # rows inside a block
        ("fp8_block", -1, 0, 40, 32),
    ],
)
def test_misaligned_slice_is_refused_naming_the_multiple(case, dim, start, stop, multiple):
    codec, shape, _, _ = CASES[case]
    parts = codec.quantize(weight(0, shape))
    with pytest.raises(AlignmentError, match=f"multiples of {multiple}"):
        codec.storage_regions(shape, dim, start, stop, name="x.weight")
    with pytest.raises(AlignmentError, match=r"x\.weight"):
        codec.slice(parts, dim, start, stop, name="x.weight")


def test_fp4_pad_by_odd_amount_is_refused():
    codec, shape, _, _ = CASES["nvfp4"]
    with pytest.raises(AlignmentError, match="multiples of 2"):
        codec.storage_pads(shape, -1, 3)


def test_fp8_block_ceil_scales_only_grow_with_the_block_count():
    codec = Fp8BlockCodec((128, 128))
    # 200 rows = 2 scale rows (one partial); +56 fills the partial block, +57 opens a third
    assert codec.storage_pads((200, 300), 0, 56)["scale"] is None
    assert codec.storage_pads((200, 300), 0, 57)["scale"] == Pad(dim=0, amount=1, fill="0000803f")
    # slicing up to the full (unaligned) size is allowed and keeps the partial block's scale
    r = codec.storage_regions((200, 300), 0, 128, 200)
    assert r["scale"] == Region(dim=0, start=1, stop=2) and r["weight"] == Region(
        dim=0, start=128, stop=200
    )
    with pytest.raises(AlignmentError):
        codec.storage_regions((200, 300), 0, 128, 199)


def test_regions_on_the_expert_dim_and_unaffected_roles():
    codec = NvFp4Codec()
    r = codec.storage_regions((4, 32, 64), 0, 1, 3)
    assert all(v == Region(dim=0, start=1, stop=3) for v in r.values())  # global_scale [E] too
    r = codec.storage_regions((4, 32, 64), -1, 32, 64)
    assert r == {
        "weight": Region(dim=2, start=16, stop=32),
        "scale": Region(dim=2, start=2, stop=4),
        "global_scale": None,
    }
    assert Fp8TensorCodec().storage_regions((32, 64), 0, 0, 16)["scale"] is None
    assert Fp8ChannelCodec().storage_regions((32, 64), 1, 0, 16)["scale"] is None


@pytest.mark.parametrize(
    ("codec", "fills"),
    [
        (Fp8TensorCodec("BF16"), {"weight": "00"}),
        (Fp8ChannelCodec("F32"), {"weight": "00", "scale": "0000803f"}),
        (Fp8BlockCodec((16, 16), "BF16"), {"weight": "00", "scale": "803f"}),
        (MxFp4Codec(), {"weight": "00", "scale": "7f"}),
        (MxFp8Codec(scale_dtype="F8_E8M0"), {"weight": "00", "scale": "7f"}),
        (NvFp4Codec(), {"weight": "00", "scale": "38"}),
        (UnquantizedCodec("F32"), {"weight": "00000000"}),
    ],
)
def test_pad_fills_are_zero_weights_and_neutral_scales(codec, fills):
    pads = codec.storage_pads((32, 64), 0, 32)
    assert {r: p.fill for r, p in pads.items() if p is not None} == fills


def test_apply_pad_writes_fill_bytes_of_any_dtype():
    t = torch.zeros(2, 3, dtype=torch.bfloat16)
    out = apply_pad(t, Pad(dim=0, amount=2, fill="803f"))
    assert out.shape == (4, 3) and out[2:].eq(1.0).all() and out[:2].eq(0).all()
    e = apply_pad(torch.zeros(2, 1, dtype=torch.float8_e8m0fnu), Pad(dim=1, amount=1, fill="7f"))
    assert e.view(torch.uint8)[:, 1].tolist() == [127, 127]
    with pytest.raises(InputError, match="bytes"):
        apply_pad(t, Pad(dim=0, amount=1, fill="00"))
    with pytest.raises(InputError, match="outside"):
        apply_region(t, Region(dim=1, start=1, stop=5))


def test_alignment_per_dim():
    assert MxFp4Codec().alignment(-1, (8, 64)) == 32
    assert NvFp4Codec().alignment(-1, (8, 64)) == 16
    assert NvFp4Codec().alignment(-2, (8, 64)) == 1
    assert Fp8BlockCodec().alignment(0, (256, 256)) == 128
    assert UnquantizedCodec().alignment(0, (7,)) == 1


def test_get_codec_from_scheme():
    mx = get_codec(Scheme(format=F.MXFP4, group_size=32, scale_dtypes=("U8",)))
    assert isinstance(mx, MxFp4Codec) and mx.scale_mode == "even"
    floor = get_codec(
        Scheme(format=F.MXFP4, group_size=32, spec={"weight": {"scale_calculation_mode": "floor"}})
    )
    assert floor.scale_mode == "floor"
    blk = get_codec(
        Scheme(format=F.FP8_BLOCK, block=(128, 128), scale_dtypes=("F32",), scale_is_e8m0=True)
    )
    assert isinstance(blk, Fp8BlockCodec) and blk.e8m0 and blk.scale_dtype == "F32"
    v4 = get_codec(Scheme(format=F.FP8_BLOCK, block=(128, 128), scale_dtypes=("F8_E8M0",)))
    assert v4.e8m0 and v4.storage_dtypes()["scale"] == "F8_E8M0"
    nv = get_codec(Scheme(format=F.NVFP4, group_size=16))
    assert isinstance(nv, NvFp4Codec) and nv.roles == ("weight", "scale", "global_scale")
    pt = get_codec(Scheme(format=F.FP8_PER_TENSOR, scale_dtypes=("BF16",)))
    assert pt.storage_dtypes() == {"weight": "F8_E4M3", "scale": "BF16"}
    assert get_codec(Scheme(format=F.UNQUANTIZED, weight_dtypes=("F32",))).dtype == "F32"
    with pytest.raises(InputError, match="no codec"):
        get_codec(Scheme(format=F.UNSUPPORTED, rule="int4 per_group"))
    with pytest.raises(InputError):
        codec_for_format(F.MXFP4, scale_dtype="F32")

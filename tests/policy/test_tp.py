"""TP geometry: per-rank share, alignment per projection and scheme, padding."""

from __future__ import annotations

import pytest

from checkpoint_tool.policy.tp import intermediate_alignment, split_alignment, tp_geometry
from checkpoint_tool.quant.configs.base import fp8_block_scheme, mxfp4_scheme, nvfp4_scheme
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

MX = mxfp4_scheme(source="t", rule="t")
NV = nvfp4_scheme(source="t", rule="t", input_scale_suffix="input_scale")
BLK = fp8_block_scheme((128, 128), scale_suffix="weight_scale_inv", scale_dtypes=("F32",),
                       e8m0=False, source="t", rule="t")  # fmt: skip
BF16 = Scheme(format=WeightFormat.UNQUANTIZED)
PT = Scheme(format=WeightFormat.FP8_PER_TENSOR)


@pytest.mark.parametrize(
    ("scheme", "proj", "expected"),
    [
        (MX, "down", 32),  # input groups of 32
        (MX, "gate", 1),  # rows are free
        (NV, "down", 16),
        (BLK, "gate", 128),  # row blocks
        (BLK, "up", 128),
        (BLK, "down", 128),  # column blocks
        (BF16, "down", 1),
        (PT, "down", 1),
    ],
)
def test_split_alignment(scheme, proj, expected):
    assert split_alignment(scheme, proj)[0] == expected


def test_intermediate_alignment_is_the_lcm_and_names_the_strictest():
    a, why = intermediate_alignment([("gate", MX), ("up", MX), ("down", MX)])
    assert a == 32 and "down" in why and "mxfp4/32" in why
    a, _ = intermediate_alignment([("down", NV), ("gate", BLK)])
    assert a == 128


def test_issue_example_160_over_tp2_mxfp4():
    g = tp_geometry(160, 2, 32)
    # 160 / 2 = 80, not a multiple of 32; next multiple is 96 per rank -> 192 in total
    assert (g.per_rank, g.divisible, g.aligned) == (80, True, False)
    assert (g.padded_per_rank, g.pad_to) == (96, 192)


def test_aligned_r1_block_fp8_tp8():
    g = tp_geometry(2048, 8, 128)
    assert g.aligned and g.per_rank == 256 and g.pad_to == 2048 and g.padded_per_rank == 256


def test_not_divisible_and_tp1():
    g = tp_geometry(100, 3, 1)
    assert (g.per_rank, g.divisible, g.aligned, g.pad_to, g.padded_per_rank) == (
        33,
        False,
        False,
        102,
        34,
    )
    g = tp_geometry(100, 1, 32)  # even tp 1 needs whole groups
    assert not g.aligned and g.pad_to == 128
    g = tp_geometry(96, 1, 32)
    assert g.aligned and g.pad_to == 96

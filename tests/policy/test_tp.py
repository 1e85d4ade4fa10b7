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


def _every_scheme() -> list[Scheme]:
    """Every weight format ckpt stores, with block / group / scale-encoding variants, as the
    config models build them."""
    from checkpoint_tool.quant.configs import (
        CompressedTensorsConfig,
        DeepSeekFp8Config,
        DeepSeekV4Config,
        ModelOptConfig,
    )
    from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec, scheme_from_spec

    def quark(weight: dict) -> Scheme:
        return scheme_from_spec(QuarkLayerSpec.model_validate({"weight": weight}), "t")

    def fp8(**qc: object) -> Scheme:
        return DeepSeekFp8Config.model_validate({"quant_method": "fp8", **qc}).scheme_for("x")

    fp8_q = {"dtype": "fp8_e4m3"}
    mx = {"qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
    v4 = DeepSeekV4Config(expert_dtype="fp4")
    nv = ModelOptConfig.from_inline({"quant_method": "modelopt", "quant_algo": "NVFP4"})
    out = [
        BF16,
        fp8(),  # per tensor
        fp8(activation_scheme="static"),
        quark({**fp8_q, "qscheme": "per_tensor"}),
        quark({**fp8_q, "qscheme": "per_channel", "ch_axis": 0}),
        fp8(weight_block_size=[128, 128]),
        fp8(weight_block_size=[128, 128], scale_fmt="ue8m0"),
        fp8(weight_block_size=[64, 128]),
        fp8(weight_block_size=[128, 32]),
        quark({**fp8_q, "qscheme": "per_block", "block_size": [128, 128]}),
        quark({**fp8_q, "qscheme": "per_block", "block_size": [64, 64], "scale_format": "e8m0"}),
        v4.linear_scheme("t"),  # block FP8 with E8M0 byte scales
        quark({"dtype": "fp4", **mx}),  # MXFP4/32
        v4.expert_scheme("t"),  # MXFP4 stored I8
        quark({**fp8_q, **mx}),  # MXFP8/32
        v4.table_scheme_for("x.engram.embed"),
        nv.scheme_for("x"),  # NVFP4/16
        NV,
    ]
    out += [s.model_copy(update={"group_size": 64}) for s in out if s.group_size == 32]
    out.append(NV.model_copy(update={"group_size": 32}))
    # compressed-tensors INT4 pack-quantized: words of eight, groups; asymmetric zero points
    # are packed eight rows a word
    int4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}
    for weights in (int4, {**int4, "group_size": 128}, {**int4, "symmetric": False}):
        ct = {
            "format": "pack-quantized",
            "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
        }
        out.append(CompressedTensorsConfig.model_validate(ct).scheme_for("x.down_proj"))
    return [s for s in out if s is not None]


@pytest.mark.parametrize("proj", ["gate", "up", "down"])
def test_split_alignment_is_the_storage_codecs(proj):
    """The policy's split alignment of the intermediate dim is the storage codec's alignment
    of that dim (gate/up rows, down columns) for every scheme: one owner, no drift."""
    from checkpoint_tool.quant.codecs import get_codec

    schemes = _every_scheme()
    assert {s.format for s in schemes} == set(WeightFormat) - {WeightFormat.UNSUPPORTED}
    for scheme in schemes:
        codec = get_codec(scheme)
        dim, shape = (-1, (7168, 2048)) if proj == "down" else (-2, (2048, 7168))
        assert split_alignment(scheme, proj)[0] == codec.alignment(dim, shape), scheme.short()
    unsupported = Scheme(format=WeightFormat.UNSUPPORTED)  # no codec: no constraint known
    assert split_alignment(unsupported, proj)[0] == 1

"""The requantizer's MXFP4 quantizer against hand-worked values and the independent codec."""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs import MxFp4Codec
from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4
from checkpoint_tool.quant.requant.source import dequantize_source, source_format
from checkpoint_tool.verify.requant import codec_mxfp4


def _row(*values: float) -> torch.Tensor:
    out = torch.zeros(1, 32)
    out[0, : len(values)] = torch.tensor(values)
    return out


def test_hand_worked_codes_and_scale() -> None:
    # amax 6 -> scale 2**0 (byte 127); 0.5 -> code 1, -3.0 -> code 13: byte 0xD1
    w, s = quantize_mxfp4(_row(0.5, -3.0, 6.0))
    assert int(s[0, 0]) == 127 and int(w[0, 0]) == 0xD1 and int(w[0, 1]) == 0x07


@pytest.mark.parametrize(
    ("value", "code"),
    [(0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6), (6.5, 7), (6.9, 7)],
)
def test_ties_go_to_the_even_code(value: float, code: int) -> None:
    # a 4.0 in the group keeps the scale at 2**0 ("even": amax < 7 * 2**0 keeps it)
    w, s = quantize_mxfp4(_row(value, 4.0))
    assert int(s[0, 0]) == 127
    assert int(w[0, 0]) & 0x0F == code


def test_even_scale_rule_rounds_amax_up_at_seven_eighths() -> None:
    # amax 7 rounds (1 mantissa bit) to 8 -> k = 3 - 2 = 1; amax 6.99 stays at k = 0
    assert int(quantize_mxfp4(_row(7.0))[1][0, 0]) == 128
    assert int(quantize_mxfp4(_row(6.99))[1][0, 0]) == 127


def test_negative_rounding_to_zero_is_plus_zero_and_zero_groups_store_byte_one() -> None:
    w, _s = quantize_mxfp4(_row(-0.1, 4.0))
    assert int(w[0, 0]) & 0x0F == 0
    assert int(quantize_mxfp4(torch.zeros(1, 32))[1][0, 0]) == 1


def test_equals_the_codec_on_fresh_random_data_over_a_wide_range() -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(96, 256, generator=g) * torch.logspace(-30, 5, 96)[:, None]
    x[::5] = x[::5].to(torch.bfloat16).float()
    w, s = quantize_mxfp4(x)
    w2, s2 = codec_mxfp4(x)
    assert torch.equal(w, w2) and torch.equal(s, s2)
    back = MxFp4Codec().dequantize({"weight": w, "scale": s})
    rel = float((back - x).norm() / x.norm())
    assert 0.0 < rel < 0.2  # MXFP4 on Gaussian data: ~0.1


def test_refuses_nan_and_bad_shapes() -> None:
    x = torch.randn(2, 64)
    x[1, 3] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        quantize_mxfp4(x, name="t")
    with pytest.raises(InputError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(2, 48), name="t")


def test_source_formats_dequantize_as_their_codecs() -> None:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(256, 512, generator=g)
    from checkpoint_tool.quant.codecs import codec_for_format

    block = codec_for_format("fp8_block", block=(128, 128)).quantize(w)
    assert source_format(block["weight"], block["scale"]) == "fp8_block 128x128"
    want = codec_for_format("fp8_block", block=(128, 128)).dequantize(block)
    assert torch.equal(dequantize_source(block), want)
    mx8 = codec_for_format("mxfp8").quantize(w)
    assert source_format(mx8["weight"], mx8["scale"]) == "mxfp8"
    assert torch.equal(dequantize_source(mx8), codec_for_format("mxfp8").dequantize(mx8))
    bf = w.to(torch.bfloat16)
    assert source_format(bf, None) == "bf16"
    assert torch.equal(dequantize_source({"weight": bf}), bf.float())

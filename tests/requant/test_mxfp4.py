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


def _every_bf16_pattern() -> torch.Tensor:
    """Every finite BF16 pattern once, shuffled, as groups ``[2040, 32]`` (float32 values)."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16).float()
    x = x[torch.isfinite(x)]
    x = x[torch.randperm(x.numel(), generator=torch.Generator().manual_seed(11))]
    return x[: x.numel() // 32 * 32].reshape(-1, 32)


def _at(groups: torch.Tensor, e: int) -> torch.Tensor:
    """``groups`` moved by powers of two (mantissas kept) so each amax is near ``2**e``, BF16."""
    amax = groups.abs().amax(dim=1, keepdim=True).clamp(min=2.0**-133)
    y = groups * torch.exp2((e - torch.frexp(amax).exponent).float())
    y[::97] = 0.0
    y[1::89] = -0.0
    return y.to(torch.bfloat16).reshape(-1, 480)


def _same_bytes(w: torch.Tensor) -> None:
    got, want, ref = quantize_mxfp4(w), quantize_mxfp4(w.float()), codec_mxfp4(w.float())
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_the_bf16_table_path_writes_the_float_paths_bytes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the integer/table path for BF16 input against the float path and the codec on the same
    # values: every finite BF16 pattern at group exponents across the table's range, zeros,
    # negative zeros and ties; the float path is switched off so the table does all of it
    from checkpoint_tool.quant.requant import mxfp4

    groups = _every_bf16_pattern()
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -1.25, -5.0])
    t = torch.zeros(64, 32)
    t[:, : ties.numel()] = ties * torch.exp2(torch.arange(-40, 24).float())[:, None]
    cases = [_at(groups, e) for e in (-118, -60, -7, 0, 3, 40, 98)]
    cases += [t.to(torch.bfloat16).reshape(-1, 512), torch.zeros(3, 64, dtype=torch.bfloat16)]
    for w in cases:
        want = quantize_mxfp4(w.float()), codec_mxfp4(w.float())
        with monkeypatch.context() as m:
            m.setattr(mxfp4, "_chunk", None)  # a fallback would raise TypeError
            got = quantize_mxfp4(w)
        for a, b in want:
            assert torch.equal(got[0], a) and torch.equal(got[1], b)


def test_the_bf16_path_falls_back_off_the_table() -> None:
    # groups whose amax is below 2**-122 or above 2**103 take the float path: same bytes
    groups = _every_bf16_pattern()
    for e in (-135, -126, -123, 101, 110, 127):
        _same_bytes(_at(groups, e))


def test_the_bf16_path_refuses_nan() -> None:
    x = torch.randn(4, 64).to(torch.bfloat16)
    x[2, 5] = float("inf")
    with pytest.raises(InputError, match="NaN or infinite"):
        quantize_mxfp4(x, name="t")

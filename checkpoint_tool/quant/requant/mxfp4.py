"""The MXFP4 quantizer of requantization: float weights -> OCP MXFP4 bytes, as Quark writes them.

Storage (Quark ``export_safetensors``): ``weight`` U8 ``[out, in/2]``, FP4 E2M1 codes packed two
per byte (element ``2k`` in the low nibble), ``weight_scale`` U8 ``[out, in/32]`` E8M0 bytes.

Rounding (the rules Quark 0.13 uses, ``scale_calculation_mode: "even"``):

- scale: the group's float32 ``amax`` rounded to 1 mantissa bit (``+0x200000`` on its bits,
  then keep sign+exponent), ``k = floor(log2) - 2`` clamped to [-127, 127]; the elements are
  scaled by ``2**-k`` but the stored byte is ``max(k, -126) + 127`` (Quark's ``to_e8m0_uint8``
  clamps the scale's log2 at -126: an all-zero group, or one with ``amax < 2**-124``, stores
  byte 1, not 0);
- element: ``x * 2**-k`` (exact in float32) rounded to the nearest E2M1 value, ties to the even
  code, saturating at 6; a negative value that rounds to zero is written +0 (code 0, not 8).

Vectorized: a few whole-array passes per chunk of rows (no Python loop per group); the chunk
bounds the working memory. ``quantize_mxfp4`` is the streaming executor's and the benchmark's
quantizer; ``quant.codecs.MxFp4Codec.quantize`` (bucketize with a tie fix-up) is the independent
one verify checks it against.

Example::

    w, s = quantize_mxfp4(torch.tensor([[0.5, -3.0] + [0.0] * 30]))
    w[0, 0], s[0, 0]   # tensor(0xD1) (= 13 << 4 | 1), tensor(127): scale 2**0
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.requant.scheme import GROUP

#: E2M1 code = how many of these bounds the magnitude exceeds (a value equal to a bound goes
#: low). Ties that round up to an even code (0.75, 1.75, 3.5) use the float32 just
#: below, so every tie lands on the even code: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2,
#: 3.5->4, 5->4.
_BOUNDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)
_BOUNDS[[1, 3, 5]] = torch.nextafter(_BOUNDS[[1, 3, 5]], torch.tensor(0.0))
_BOUNDS_LIST = [float(b) for b in _BOUNDS]
#: elements per chunk (float32 working set ~8 MB: stays in cache-sized passes)
CHUNK_ELEMENTS = 1 << 21


def scale_exponents(amax_bits: torch.Tensor) -> torch.Tensor:
    """int32 bits of each group's float32 amax -> the E8M0 exponent ``k`` (int32), Quark "even"."""
    rounded = (amax_bits + 0x200000) & 0x7F800000
    return ((rounded >> 23) - 129).clamp_(-127, 127)


def quantize_mxfp4(x: torch.Tensor, *, name: str = "weight") -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` float ``[rows, cols]`` (cols a multiple of 32) -> (packed U8 ``[rows, cols/2]``,
    E8M0 U8 ``[rows, cols/32]``). NaN/inf inputs are refused (Quark would write garbage)."""
    if x.ndim != 2 or x.shape[1] % GROUP:
        raise InputError(
            f"{name}: MXFP4 needs a 2-D weight whose input dim is a multiple of {GROUP}, got "
            f"shape {list(x.shape)}; requantize only linear weights of such shapes"
        )
    rows, cols = x.shape
    packed = torch.empty((rows, cols // 2), dtype=torch.uint8)
    scales = torch.empty((rows, cols // GROUP), dtype=torch.uint8)
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):  # a chunk of rows at a time: bounded memory
        r1 = min(rows, r0 + step)
        _chunk(x[r0:r1], packed[r0:r1], scales[r0:r1], name)
    return packed, scales


def _chunk(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, name: str) -> None:
    n, cols = x.shape
    f = x.to(torch.float32)
    if f.data_ptr() == x.data_ptr() or not f.is_contiguous():
        f = f.contiguous().clone()  # the passes below work in place
    negative = f.view(torch.int32) < 0
    mag_bits = f.abs_().view(torch.int32)
    amax = mag_bits.view(n, cols // GROUP, GROUP).amax(dim=-1)
    if int(amax.max()) >= 0x7F800000:
        raise InputError(
            f"{name}: the weight holds NaN or infinite values; fix the source tensor before "
            "requantizing it"
        )
    k = scale_exponents(amax)
    scales.copy_((k + 127).clamp_(min=1).to(torch.uint8))  # Quark stores at least 2**-126
    inv = ((127 - k) << 23).view(torch.float32)  # 2**-k exactly (k <= 127 keeps it normal)
    inv = torch.where(k == 127, torch.tensor(2.0**-127), inv)  # 2**-127: a subnormal
    mag = f.view(n, cols // GROUP, GROUP).mul_(inv[..., None]).view(n, cols)
    above = torch.empty((n, cols), dtype=torch.bool)
    code = torch.gt(mag, _BOUNDS_LIST[0]).view(torch.uint8)
    for bound in _BOUNDS_LIST[1:]:  # seven compares: the code counts the bounds below it
        code += torch.gt(mag, bound, out=above).view(torch.uint8)
    sign = negative.view(torch.uint8) << 3
    code |= sign & ((code + 7) & 8)  # the sign bit, on non-zero codes only (Quark: +0)
    torch.bitwise_or(code[:, 0::2], code[:, 1::2] << 4, out=packed)

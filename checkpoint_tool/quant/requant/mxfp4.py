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

Vectorized, a chunk of rows at a time (the chunk bounds the working memory; no Python loop per
group), on two paths that write the same bytes:

- BF16 input (the common source): integer passes on the 16-bit patterns. A group's E8M0
  exponent ``k`` comes from its amax bits; ``x * 2**-k`` only moves the exponent field, so the
  scaled value's pattern is ``bits - (k << 7)`` and its E2M1 code (sign included) is a lookup in
  a 64 Ki-entry table built from the same rounding bounds (``_LUT``); two codes are packed per
  byte with one shift and one or. The chunks run on ``torch.get_num_threads()`` threads (numpy
  releases the GIL). A chunk holding a group outside the table's exponent range (amax below
  ``2**-122`` or above ``2**103``) takes the float path.
- any other float: float32 passes (scale, seven compares, sign, pack).

``quantize_mxfp4`` is the streaming executor's and the benchmark's quantizer;
``quant.codecs.MxFp4Codec.quantize`` (bucketize with a tie fix-up) is the independent one
verify checks it against.

Example::

    w, s = quantize_mxfp4(torch.tensor([[0.5, -3.0] + [0.0] * 30]))
    w[0, 0], s[0, 0]   # tensor(0xD1) (= 13 << 4 | 1), tensor(127): scale 2**0
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
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
#: elements per chunk of the BF16 path (int16 working set ~0.5 MB: stays in L2)
BF16_CHUNK_ELEMENTS = 1 << 18
#: the BF16 path's table: scaled pattern ``s = bits - (k << 7) - _LO`` (int16, wrapping) -> code
_LO = 0x3E80  # bf16 0.25, the first rounding bound
#: scaled magnitudes above the bound 5.0 (pattern 0x40A0) saturate; below 7.0 (0x40E0) in a group
_HI = 0x40E0 - _LO
#: group exponents the table covers: the wrapped patterns of + and - values stay apart
_K_MIN, _K_MAX = -124, 100


def _code_table() -> np.ndarray:
    """uint8 [65536]: index ``s & 0xFFFF`` -> E2M1 code with sign (module doc). Positive values
    land on ``[0, _HI]`` (and negative ``s`` wraps high: code 0), negative ones on
    ``0x8000 + s`` for ``s`` in ``[-(_K_MAX << 7) - _LO, _HI]``: disjoint ranges."""

    def codes(s: np.ndarray) -> np.ndarray:
        f = ((s + _LO).astype(np.uint32) << 16).view(np.float32)
        out = np.zeros(s.shape, np.uint8)
        for bound in _BOUNDS_LIST:
            out += f > np.float32(bound)
        return out

    lut = np.zeros(1 << 16, np.uint8)
    pos = np.arange(0, _HI + 1)
    lut[pos] = codes(pos)
    neg = np.arange(-(_K_MAX << 7) - _LO, _HI + 1)
    c = codes(neg)
    lut[(neg + 0x8000) & 0xFFFF] = np.where(c != 0, c | 8, 0)
    return lut


_LUT = _code_table()


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
    if x.dtype == torch.bfloat16 and rows and cols and sys.byteorder == "little":
        _quantize_bf16(x.contiguous(), packed, scales, name)
        return packed, scales
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):  # a chunk of rows at a time: bounded memory
        r1 = min(rows, r0 + step)
        _chunk(x[r0:r1], packed[r0:r1], scales[r0:r1], name)
    return packed, scales


def _quantize_bf16(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, name: str) -> None:
    rows, cols = x.shape
    bits, pk, sc = x.view(torch.int16).numpy(), packed.numpy(), scales.numpy()
    step = max(1, BF16_CHUNK_ELEMENTS // cols)
    spans = [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]
    workers = min(len(spans), max(1, torch.get_num_threads()))

    def stripe(i: int) -> None:  # every workers-th chunk, with its own scratch buffers
        scratch = _Scratch(min(step, rows), cols)
        for r0, r1 in spans[i::workers]:
            if not _chunk_bf16(bits[r0:r1], pk[r0:r1], sc[r0:r1], scratch, name):
                _chunk(x[r0:r1], packed[r0:r1], scales[r0:r1], name)  # off the table

    if workers == 1:
        stripe(0)
        return
    with ThreadPoolExecutor(workers) as pool:  # numpy releases the GIL in every pass
        list(pool.map(stripe, range(workers)))


class _Scratch:
    """One worker's buffers for a chunk of ``rows x cols`` (reused: no allocation per pass)."""

    def __init__(self, rows: int, cols: int) -> None:
        self.scaled = np.empty((rows, cols), np.int16)
        self.code = np.empty((rows, cols), np.uint8)
        #: magnitudes with the group's elements down a column: the amax is a max over rows
        self.mag_t = np.empty((GROUP, rows * (cols // GROUP)), np.int16)
        self.amax = np.empty(rows * (cols // GROUP), np.int16)


def _chunk_bf16(
    bits: np.ndarray, packed: np.ndarray, scales: np.ndarray, scratch: _Scratch, name: str
) -> bool:
    """One chunk of BF16 patterns (int16 ``[n, cols]``); False: a group is off the table."""
    n, cols = bits.shape
    groups = cols // GROUP
    m = n * groups
    mag_t = scratch.mag_t[:, :m]
    np.bitwise_and(bits.reshape(m, GROUP).T, np.int16(0x7FFF), out=mag_t)
    amax = np.max(mag_t, axis=0, out=scratch.amax[:m]).reshape(n, groups).astype(np.int32)
    if int(amax.max()) >= 0x7F80:
        raise InputError(
            f"{name}: the weight holds NaN or infinite values; fix the source tensor before "
            "requantizing it"
        )
    k = np.clip(((((amax << 16) + 0x200000) & 0x7F800000) >> 23) - 129, -127, 127)
    scales[...] = np.maximum(k + 127, 1)  # Quark stores at least 2**-126
    k = np.where(amax == 0, 0, k)  # an all-zero group: any exponent gives code 0
    if int(k.min()) < _K_MIN or int(k.max()) > _K_MAX:
        return False
    offset = ((k << 7) + _LO).astype(np.int16)
    scaled = np.subtract(
        bits.reshape(n, groups, GROUP),
        offset[..., None],
        out=scratch.scaled[:n].reshape(n, groups, GROUP),
    )
    code = np.take(_LUT, scaled.view(np.uint16).reshape(n, cols), out=scratch.code[:n])
    pair = code.view(np.uint16)  # little-endian: element 2j in the low byte
    np.bitwise_or(pair, pair >> 4, out=packed, casting="unsafe")
    return True


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

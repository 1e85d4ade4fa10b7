"""Every registered format keeps the protocol's promises (``checkpoint_tool.formats``).

Registry-driven: a new format module is checked here as soon as it is registered, on fresh
random data, with nothing to add. What is checked, per decodable format:

- its storage class, codec class and ``member`` agree, and ``import checkpoint_tool.formats``
  imports no torch;
- the codec writes exactly the shapes and dtypes the storage class predicts;
- ``logical_shape`` undoes the packing of the stored weight;
- an aligned slice of the stored tensors, anywhere on any dim, decodes to the same slice of the
  decoded weight (bit for bit), and a pad decodes to the weight followed by exact zeros;
- a misaligned slice is refused.

Example of the data (MXFP4, logical ``[2, 40, 96]``)::

    parts = {"weight": U8 [2, 40, 48], "scale": U8 [2, 40, 3]}
    codec.slice(parts, -1, 32, 64)  # -> {"weight": U8 [2, 40, 16], "scale": U8 [2, 40, 1]}
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.formats import Format, all_formats, format_of
from checkpoint_tool.quant.codecs.torch_dtypes import TORCH_DTYPE
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

DECODABLE = [f for f in all_formats() if f.decodable]
IDS = [f.name for f in DECODABLE]


def _codec(fmt: Format):
    # small FP8 blocks keep the shapes small; every other format with its defaults
    return fmt.codec(block=(16, 32)) if fmt.member is WeightFormat.FP8_BLOCK else fmt.codec()


def _shape(codec) -> tuple[int, int, int]:
    """[2, out, in] with a partial last block or group on both dims where the format has one."""
    rows, cols = codec.alignment(-2, (1, 1)), codec.alignment(-1, (1, 1))
    return (2, 2 * rows + (rows // 2 if rows > 1 else 3), 3 * cols)


def _weight(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-4, 4, shape[:-1], generator=g))[..., None]
    return torch.where(w == 0, torch.ones_like(w), w)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.float().contiguous().view(torch.int32)


def test_import_is_torch_free() -> None:
    code = "import sys, checkpoint_tool.formats; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_member_has_one_format() -> None:
    assert sorted(f.member.value for f in all_formats()) == sorted(m.value for m in WeightFormat)
    for member in WeightFormat:
        assert format_of(member) is format_of(member.value) is format_of(Scheme(format=member))


def test_unknown_spelling_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no codec for weight format 'int3'"):
        format_of("int3")


def test_unsupported_refuses_to_decode_with_the_rule() -> None:
    scheme = Scheme(format="unsupported", rule="quark: int4 weights")
    fmt = format_of(scheme)
    assert not fmt.decodable and fmt.kernel is None and fmt.scale_param(scheme) is None
    with pytest.raises(InputError, match="rule: quark: int4 weights"):
        fmt.storage_for(scheme)
    assert fmt.alignment(scheme, -1) == 1


@pytest.mark.parametrize("fmt", DECODABLE, ids=IDS)
def test_classes_agree(fmt: Format) -> None:
    assert fmt.storage_class is not None and fmt.storage_class.format is fmt.member
    assert issubclass(fmt.codec_class, fmt.storage_class)
    assert fmt.weight_pack == fmt.storage_class.weight_pack
    assert fmt.short(Scheme(format=fmt.member)) == fmt.name


@pytest.mark.parametrize("fmt", DECODABLE, ids=IDS)
def test_codec_writes_what_storage_predicts(fmt: Format) -> None:
    codec = _codec(fmt)
    shape = _shape(codec)
    parts = codec.quantize(_weight(shape, 1))
    want = codec.storage_shapes(shape)
    assert {r: tuple(t.shape) for r, t in parts.items()} == want
    dtypes = codec.storage_dtypes()
    assert {r: t.dtype for r, t in parts.items()} == {r: TORCH_DTYPE[d] for r, d in dtypes.items()}
    assert fmt.logical_shape(dtypes["weight"], tuple(parts["weight"].shape)) == shape
    assert tuple(codec.dequantize(parts).shape) == shape


@pytest.mark.parametrize("fmt", DECODABLE, ids=IDS)
@pytest.mark.parametrize("dim", [0, -2, -1])
def test_aligned_slices_decode_to_the_slice(fmt: Format, dim: int) -> None:
    codec = _codec(fmt)
    shape = _shape(codec)
    parts = codec.quantize(_weight(shape, 2))
    full = codec.dequantize(parts)
    a = codec.alignment(dim, shape)
    n = shape[dim]
    for start, stop in ((0, a), (a, 2 * a), (2 * a if dim else 1, n)):
        got = codec.dequantize(codec.slice(parts, dim, start, stop))
        assert torch.equal(_bits(got), _bits(full.narrow(dim, start, stop - start)))
    if a > 1:
        with pytest.raises(AlignmentError):
            codec.storage_regions(shape, dim, a // 2, a)


@pytest.mark.parametrize("fmt", DECODABLE, ids=IDS)
@pytest.mark.parametrize("dim", [-2, -1])
def test_pads_decode_to_zeros(fmt: Format, dim: int) -> None:
    codec = _codec(fmt)
    shape = _shape(codec)
    parts = codec.quantize(_weight(shape, 3))
    full = codec.dequantize(parts)
    # a multiple of the alignment, so the logical size stays whole bytes and groups
    amount = codec.alignment(dim, shape) * (2 if dim == -1 else 1)
    got = codec.dequantize(codec.pad(parts, dim, amount))
    zeros = torch.zeros_like(full.narrow(dim, 0, 1)).repeat_interleave(amount, dim=dim)
    assert torch.equal(_bits(got), _bits(torch.cat([full, zeros], dim=dim)))

"""Pick the codec for a ``Scheme`` (from a quantization config) or for a bare format.

The choice and its defaults are the storage format's (``quant.storage.formats``); this table only
swaps each format's storage class for its codec class.

Example::

    codec_for_format(WeightFormat.FP8_BLOCK, block=(128, 128), scale_dtype="F32")
    get_codec(scheme)   # scheme.format mxfp4, group 32, scale U8 -> MxFp4Codec(32, "U8", "even")
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.quant.codecs.base import BaseCodec
from checkpoint_tool.quant.codecs.fp8_block import Fp8BlockCodec
from checkpoint_tool.quant.codecs.fp8_scaled import Fp8ChannelCodec, Fp8TensorCodec
from checkpoint_tool.quant.codecs.int4 import Int4Codec
from checkpoint_tool.quant.codecs.mxfp4 import MxFp4Codec
from checkpoint_tool.quant.codecs.mxfp8 import MxFp8Codec
from checkpoint_tool.quant.codecs.nvfp4 import NvFp4Codec
from checkpoint_tool.quant.codecs.unquantized import UnquantizedCodec
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.quant.storage.formats import scheme_arguments, storage_for_format

CODECS: dict[WeightFormat, type[BaseCodec]] = {
    WeightFormat.UNQUANTIZED: UnquantizedCodec,
    WeightFormat.FP8_PER_TENSOR: Fp8TensorCodec,
    WeightFormat.FP8_PER_CHANNEL: Fp8ChannelCodec,
    WeightFormat.FP8_BLOCK: Fp8BlockCodec,
    WeightFormat.MXFP4: MxFp4Codec,
    WeightFormat.MXFP8: MxFp8Codec,
    WeightFormat.NVFP4: NvFp4Codec,
    WeightFormat.INT4: Int4Codec,
}


def codec_for_format(fmt: WeightFormat | str, **options: Any) -> BaseCodec:
    """A codec for ``fmt`` with defaults for anything not given (see ``storage_for_format``:
    ``block``, ``group_size``, ``scale_dtype``, ``scale_is_e8m0``, ``weight_dtype``,
    ``scale_mode``)."""
    codec = storage_for_format(fmt, classes=CODECS, **options)
    assert isinstance(codec, BaseCodec)
    return codec


def get_codec(scheme: Scheme) -> BaseCodec:
    """The codec that reads and writes weights stored per ``scheme``."""
    args = scheme_arguments(scheme)
    return codec_for_format(args.pop("fmt"), **args)

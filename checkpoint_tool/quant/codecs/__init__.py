"""Codecs: encode/decode every storage format ckpt understands, and slice/pad them exactly.

Element codecs: ``fp4`` (E2M1, packed), ``e8m0``, ``fp8`` (E4M3FN). Weight codecs (one module
per format, all ``WeightCodec``): ``unquantized``, ``fp8_scaled`` (per tensor, per channel),
``fp8_block``, ``mxfp4``, ``nvfp4``, ``mxfp8``. See CODEC_API.md and docs/formats.md.

Example::

    from checkpoint_tool.quant.codecs import codec_for_format, get_codec
    codec = get_codec(scheme)                       # from a resolved quantization config
    w = codec.dequantize({"weight": q, "scale": s})  # float32 [out, in]
    regions = codec.storage_regions((out, in_), -1, 0, in_ // 2)   # TP slice, storage coords
"""

from checkpoint_tool.quant.codecs.base import Axis, BaseCodec, WeightCodec
from checkpoint_tool.quant.codecs.fp8_block import Fp8BlockCodec
from checkpoint_tool.quant.codecs.fp8_scaled import Fp8ChannelCodec, Fp8TensorCodec
from checkpoint_tool.quant.codecs.int4 import Int4Codec
from checkpoint_tool.quant.codecs.mxfp4 import MxFp4Codec
from checkpoint_tool.quant.codecs.mxfp8 import MxFp8Codec
from checkpoint_tool.quant.codecs.nvfp4 import NvFp4Codec
from checkpoint_tool.quant.codecs.ops import apply_pad, apply_region
from checkpoint_tool.quant.codecs.registry import codec_for_format, get_codec
from checkpoint_tool.quant.codecs.unquantized import UnquantizedCodec

__all__ = [
    "Axis",
    "BaseCodec",
    "Fp8BlockCodec",
    "Fp8ChannelCodec",
    "Fp8TensorCodec",
    "Int4Codec",
    "MxFp4Codec",
    "MxFp8Codec",
    "NvFp4Codec",
    "UnquantizedCodec",
    "WeightCodec",
    "apply_pad",
    "apply_region",
    "codec_for_format",
    "get_codec",
]

"""Pick the codec for a ``Scheme`` (from a quantization config) or for a bare format.

The choice, the codec class and its defaults are the format's (``checkpoint_tool.formats``:
``Format.codec_path``, ``Format.build``).

Example::

    codec_for_format("fp8_block", block=(128, 128), scale_dtype="F32")
    get_codec(scheme)   # scheme.format mxfp4, group 32, scale U8 -> MxFp4Codec(32, "U8", "even")
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.formats import format_of
from checkpoint_tool.quant.codecs.base import BaseCodec
from checkpoint_tool.quant.scheme import Scheme, WeightFormat


def codec_for_format(fmt: WeightFormat | str, **options: Any) -> BaseCodec:
    """A codec for ``fmt`` with defaults for anything not given (``formats.Options``:
    ``block``, ``group_size``, ``scale_dtype``, ``scale_is_e8m0``, ``weight_dtype``,
    ``scale_mode``)."""
    codec = format_of(fmt).codec(**options)
    assert isinstance(codec, BaseCodec)
    return codec


def get_codec(scheme: Scheme) -> BaseCodec:
    """The codec that reads and writes weights stored per ``scheme``."""
    codec = format_of(scheme).codec_for(scheme)
    assert isinstance(codec, BaseCodec)
    return codec

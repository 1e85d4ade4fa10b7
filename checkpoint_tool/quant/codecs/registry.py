"""Pick the codec for a ``Scheme`` (from a quantization config) or for a bare format.

Example::

    codec_for_format(WeightFormat.FP8_BLOCK, block=(128, 128), scale_dtype="F32")
    get_codec(scheme)   # scheme.format mxfp4, group 32, scale U8 -> MxFp4Codec(32, "U8", "even")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs.base import BaseCodec
from checkpoint_tool.quant.codecs.fp8_block import Fp8BlockCodec
from checkpoint_tool.quant.codecs.fp8_channel import Fp8ChannelCodec
from checkpoint_tool.quant.codecs.fp8_tensor import Fp8TensorCodec
from checkpoint_tool.quant.codecs.mxfp4 import MxFp4Codec
from checkpoint_tool.quant.codecs.mxfp8 import MxFp8Codec
from checkpoint_tool.quant.codecs.nvfp4 import NvFp4Codec
from checkpoint_tool.quant.codecs.unquantized import UnquantizedCodec
from checkpoint_tool.quant.scheme import Scheme, WeightFormat


def codec_for_format(
    fmt: WeightFormat | str,
    *,
    block: tuple[int, int] | None = None,
    group_size: int | None = None,
    scale_dtype: str | None = None,
    scale_is_e8m0: bool = False,
    weight_dtype: str | None = None,
    scale_mode: str | None = None,
) -> BaseCodec:
    """A codec for ``fmt`` with defaults for anything not given.

    Defaults: block (128, 128); groups 32 (MX) / 16 (NVFP4); scales F32 (FP8), U8 (MX),
    F8_E4M3 (NVFP4); MX scale mode "even"; unquantized weight dtype BF16.
    ``scale_is_e8m0`` makes FP8 block scales powers of two (DeepSeek ``scale_fmt: ue8m0``).
    """
    fmt = WeightFormat(fmt)
    if fmt is WeightFormat.UNQUANTIZED:
        return UnquantizedCodec(weight_dtype or "BF16")
    if fmt is WeightFormat.FP8_PER_TENSOR:
        return Fp8TensorCodec(scale_dtype or "F32")
    if fmt is WeightFormat.FP8_PER_CHANNEL:
        return Fp8ChannelCodec(scale_dtype or "F32")
    if fmt is WeightFormat.FP8_BLOCK:
        b = tuple(block) if block else (128, 128)
        if len(b) != 2:
            raise InputError(f"fp8_block: block size must be [rows, cols], got {list(b)}")
        return Fp8BlockCodec((int(b[0]), int(b[1])), scale_dtype or "F32", e8m0=scale_is_e8m0)
    if fmt is WeightFormat.MXFP4:
        return MxFp4Codec(group_size or 32, scale_dtype or "U8", scale_mode or "even")
    if fmt is WeightFormat.MXFP8:
        return MxFp8Codec(group_size or 32, scale_dtype or "U8", scale_mode or "even")
    if fmt is WeightFormat.NVFP4:
        return NvFp4Codec(group_size or 16, scale_dtype or "F8_E4M3")
    raise InputError(f"no codec for weight format '{fmt.value}' (ckpt cannot decode it)")


def get_codec(scheme: Scheme) -> BaseCodec:
    """The codec that reads and writes weights stored per ``scheme``."""
    if scheme.format is WeightFormat.UNSUPPORTED:
        raise InputError(
            f"no codec for this quantization scheme (rule: {scheme.rule or 'unknown'}); "
            "ckpt can copy such tensors but not decode them"
        )
    return codec_for_format(
        scheme.format,
        block=scheme.block,
        group_size=scheme.group_size,
        scale_dtype=_first(scheme.scale_dtypes),
        scale_is_e8m0=scheme.scale_is_e8m0,
        weight_dtype=_first(scheme.weight_dtypes) if not scheme.quantized else None,
        scale_mode=_scale_mode(scheme.spec),
    )


def _first(dtypes: Iterable[str]) -> str | None:
    for d in dtypes:
        return d
    return None


def _scale_mode(spec: Any) -> str | None:
    """Quark ``scale_calculation_mode`` of the weight spec, if the producer recorded one."""
    if isinstance(spec, dict):
        weight = spec.get("weight", spec)
        for cfg in weight if isinstance(weight, list) else [weight]:
            if isinstance(cfg, dict) and cfg.get("scale_calculation_mode") in ("even", "floor"):
                return str(cfg["scale_calculation_mode"])
    return None

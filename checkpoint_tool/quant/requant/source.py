"""A requantized module's source weight as float32: BF16/F16/F32 as stored, FP8 E4M3 with its
scale (block, per-channel, per-tensor, or MXFP8's E8M0 per 32) dequantized by ckpt's codecs.

The storage is read off the tensors themselves (dtypes and shapes), so the executor needs no
quantization config: an FP8 weight ``[N, K]`` with a float scale ``[ceil(N/b0), ceil(K/b1)]`` is
block FP8 with the power-of-two blocks ``b0 x b1`` those counts give; a ``U8``/``F8_E8M0`` scale
``[N, K/32]`` is MXFP8. ``verify`` dequantizes the same module through the config instead.

Example::

    w = dequantize_source({"weight": fp8 [256, 512], "scale": f32 [2, 4]})   # block 128 x 128
    w.dtype, w.shape   # (torch.float32, torch.Size([256, 512]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs import codec_for_format

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_E8M0 = (torch.uint8, torch.float8_e8m0fnu)
#: ``source_format``'s spelling -> the format that decodes it (fp8_block carries its block)
_DECODED_AS = {
    "mxfp4": "mxfp4",
    "mxfp8": "mxfp8",
    "fp8_tensor": "fp8_per_tensor",
    "fp8_channel": "fp8_per_channel",
    "fp8_block": "fp8_block",
}


def source_format(weight: torch.Tensor, scale: torch.Tensor | None) -> str:
    """What the storage says the source is: ``"bf16"``, ``"fp8_block 128x128"``, ``"mxfp8"``..."""
    if weight.dtype in _FLOATS:
        return {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[weight.dtype]
    if weight.dtype == torch.uint8 and scale is not None and scale.dtype in _E8M0:
        return "mxfp4"
    if weight.dtype != torch.float8_e4m3fn or scale is None or weight.ndim != 2:
        raise InputError(
            f"weight {weight.dtype} {list(weight.shape)} with scale "
            f"{None if scale is None else (scale.dtype, list(scale.shape))}: only BF16/F16/F32, "
            "FP8 E4M3 (block, channel, tensor, MXFP8) or MXFP4 sources can be requantized"
        )
    n, k = weight.shape
    if scale.numel() == 1:
        return "fp8_tensor"
    if tuple(scale.shape) in ((n,), (n, 1)):
        return "fp8_channel"
    if scale.dtype in _E8M0 and tuple(scale.shape) == (n, -(-k // 32)):
        return "mxfp8"
    b0, b1 = _block(n, scale.shape[0]), _block(k, scale.shape[-1])
    return f"fp8_block {b0}x{b1}"


def _block(size: int, count: int) -> int:
    """The power-of-two block that cuts ``size`` into ``count`` blocks (the last may be short)."""
    b = 1
    while -(-size // b) > count:
        b *= 2
    if -(-size // b) != count:
        raise InputError(f"a scale of {count} blocks does not cut a dim of {size} into blocks")
    return b


def dequantize_source(parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``{"weight": ..., "scale": ...}`` (scale absent for float weights) -> float32 weight."""
    weight, scale = parts["weight"], parts.get("scale")
    fmt = source_format(weight, scale)
    if fmt in ("bf16", "f16", "f32"):
        return weight.to(torch.float32)
    assert scale is not None
    name, _, block = fmt.partition(" ")
    options: dict[str, Any] = {"scale_dtype": _scale_dtype(scale)}
    if block:
        options["block"] = tuple(int(v) for v in block.split("x"))
    if name == "fp8_tensor":
        scale = scale.reshape(())
    codec = codec_for_format(_DECODED_AS[name], **options)
    return codec.dequantize({"weight": weight, "scale": scale}).to(torch.float32)


def _scale_dtype(scale: torch.Tensor) -> str:
    return {
        torch.float32: "F32",
        torch.bfloat16: "BF16",
        torch.float16: "F16",
        torch.uint8: "U8",
        torch.float8_e8m0fnu: "F8_E8M0",
    }[scale.dtype]

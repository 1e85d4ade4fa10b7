"""torch dtypes of codec outputs (the torch-free dtype facts live in ``formats.dtypes``).

Example::

    TORCH_DTYPE["F8_E4M3"]            # torch.float8_e4m3fn
    SAFETENSORS_NAME[torch.bfloat16]  # 'BF16'
"""

from __future__ import annotations

import torch

#: safetensors dtype -> torch dtype codecs produce for it
TORCH_DTYPE: dict[str, torch.dtype] = {
    "U8": torch.uint8,
    "I8": torch.int8,
    "F4": torch.uint8,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E8M0": torch.float8_e8m0fnu,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "I32": torch.int32,
    "I64": torch.int64,
}

#: torch float dtype -> safetensors name
SAFETENSORS_NAME: dict[torch.dtype, str] = {
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.float32: "F32",
}

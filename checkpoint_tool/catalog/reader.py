"""Read tensor bytes by byte range, without loading whole shards.

Reads go through ``Catalog.read_bytes`` (``os.preadv`` of a local shard at the entry's absolute
offsets, or a ranged read of a remote one), so only the bytes a caller asks for are read. Raw bytes come back as a torch tensor of the *storage* dtype (``U8`` ->
uint8, ``F8_E4M3`` -> float8_e4m3fn, ``F8_E8M0`` -> uint8 view, ``F4`` -> uint8 packed bytes).

Example::

    t = read_tensor(cat, cat.get("model.layers.3.mlp.experts.0.gate_proj.weight"))
    t.dtype, t.shape  # (torch.uint8, torch.Size([192, 128]))
"""

from __future__ import annotations

import torch

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_shape
from checkpoint_tool.errors import InputError

#: safetensors dtype -> torch dtype of the tensor we hand out. Sub-byte and E8M0 types come
#: back as uint8 bytes (E8M0: one byte per element; F4: packed, last dim halved).
TORCH_STORAGE_DTYPE: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E8M0": torch.uint8,
    "I16": torch.int16,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I32": torch.int32,
    "F32": torch.float32,
    "I64": torch.int64,
    "F64": torch.float64,
    "F4": torch.uint8,
}


def entry_storage_shape(entry: TensorEntry) -> tuple[int, ...]:
    """Shape of the tensor as handed out (``F4`` logical last dim halved to bytes)."""
    return storage_shape(entry.dtype, entry.shape, name=entry.name)


def bytes_to_tensor(raw: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Wrap raw little-endian bytes as a torch tensor of the storage dtype."""
    if dtype not in TORCH_STORAGE_DTYPE:
        raise InputError(f"dtype {dtype} cannot be read as a tensor by ckpt")
    t = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if raw
        else torch.empty(0, dtype=torch.uint8)
    )
    return t.view(TORCH_STORAGE_DTYPE[dtype]).reshape(shape)


def read_tensor(cat: Catalog, entry: TensorEntry | str) -> torch.Tensor:
    """Read one whole tensor in its storage dtype."""
    if isinstance(entry, str):
        entry = cat.get(entry)
    raw = cat.read_bytes(entry.file, entry.begin, entry.end)  # local pread or ranged GET
    return bytes_to_tensor(raw, entry.dtype, entry_storage_shape(entry))


def read_rows(cat: Catalog, entry: TensorEntry, start: int, stop: int) -> torch.Tensor:
    """Read rows ``[start, stop)`` along dim 0 only (one contiguous byte range)."""
    shape = entry_storage_shape(entry)
    row_bytes = entry.nbytes // shape[0] if shape and shape[0] else 0
    raw = cat.read_bytes(
        entry.file, entry.begin + start * row_bytes, entry.begin + stop * row_bytes
    )
    return bytes_to_tensor(raw, entry.dtype, (stop - start, *shape[1:]))

"""Test helpers: run a plan's pieces on real tensor bytes without the executor or the codecs'
ops (numpy on raw bytes), and plan a synth checkpoint in one call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import OutputTensor, Plan, PlanOptions

TORCH = {
    "U8": torch.uint8,
    "I8": torch.int8,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E8M0": torch.float8_e8m0fnu,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "I32": torch.int32,
    "I64": torch.int64,
}


def plan_of(path: Path, **options) -> tuple[Catalog, Plan]:
    cat = open_catalog(path)
    recipe = options.pop("recipe", None)
    return cat, plan_for_catalog(cat, PlanOptions(**options), recipe=recipe)


def read(cat: Catalog, name: str) -> torch.Tensor:
    entry = cat.tensors[name]
    with safe_open(str(cat.root / entry.file), "pt") as f:
        t = f.get_tensor(name)
    if name.endswith("_blocks") and t.dim() == 4:  # gpt-oss [E, R, G, 16]: plans see [E, R, G*16]
        t = t.reshape(*t.shape[:2], -1)
    return t


def _bytes(t: torch.Tensor) -> np.ndarray:
    """Storage tensor -> uint8 array of shape (*shape, itemsize)."""
    size = t.element_size()
    raw = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    return raw.reshape(*t.shape, size)


def _tensor(raw: np.ndarray, dtype: str) -> torch.Tensor:
    shape = raw.shape[:-1]
    return torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1).view(TORCH[dtype]).reshape(shape)


def materialize(cat: Catalog, out: OutputTensor) -> torch.Tensor:
    """The bytes a correct executor writes for ``out``, computed independently."""
    parts = []
    for piece in out.pieces:
        raw = _bytes(read(cat, piece.source))
        for region in piece.slices:
            raw = np.take(raw, range(region.start, region.stop), axis=region.dim)
        for pad in piece.pads:
            fill = np.frombuffer(bytes.fromhex(pad.fill), dtype=np.uint8)
            shape = list(raw.shape)
            shape[pad.dim] = pad.amount
            block = np.broadcast_to(fill, shape).copy()
            raw = np.concatenate([raw, block], axis=pad.dim)
        parts.append(raw)
    if out.combine == "single":
        raw = parts[0]
    elif out.combine == "concat":
        raw = np.concatenate(parts, axis=out.axis)
    else:
        raw = np.stack(parts, axis=out.axis)
    t = _tensor(raw, out.dtype)
    if list(t.shape) != list(out.shape):  # one expert cut from a 3-D tensor: [1, I, H]
        assert [n for n in t.shape if n != 1] == [n for n in out.shape if n != 1], out.name
        assert out.combine == "single", out.name
        t = t.reshape(out.shape)
    return t


def outputs(plan: Plan) -> dict[str, OutputTensor]:
    return {t.name: t for f in plan.files for t in f.tensors}

"""Split a layout's tensors into shards, and name the shards as producers do.

Two policies: greedy by byte budget (``shard_size``, like ``save_pretrained``'s
``max_shard_size``) or a fixed count balanced by bytes (``shards``: a full-size DeepSeek-R1
layout has 163). Tensors keep their generation order across shards (layer by layer), so a
weight and its scales are adjacent and land in different shards only at a boundary.

Example::

    split_greedy(specs, 1 << 20)   # [[spec, spec, ...], [...]]  each <= 1 MiB unless one tensor is bigger
    shard_name(1, 163, 6)          # 'model-00001-of-000163.safetensors'
"""

from __future__ import annotations

from checkpoint_tool.synth.layout import TensorSpec


def spec_nbytes(spec: TensorSpec) -> int:
    return spec.nbytes


def shard_name(k: int, n: int, total_digits: int = 5) -> str:
    """``model-0000K-of-0000N.safetensors`` (``total_digits`` wide after ``of``)."""
    return f"model-{k:05d}-of-{n:0{total_digits}d}.safetensors"


def split_greedy(specs: list[TensorSpec], shard_size: int) -> list[list[TensorSpec]]:
    """Start a new shard when the next tensor would push the current one past ``shard_size``."""
    shards: list[list[TensorSpec]] = [[]]
    used = 0
    for spec in specs:
        n = spec_nbytes(spec)
        if shards[-1] and used + n > shard_size:
            shards.append([])
            used = 0
        shards[-1].append(spec)
        used += n
    return shards


def split_balanced(specs: list[TensorSpec], count: int) -> list[list[TensorSpec]]:
    """About ``count`` shards of equal bytes (fewer if tensors are fewer or larger than a share)."""
    total = sum(spec_nbytes(s) for s in specs) or 1
    count = max(1, min(count, len(specs)))
    shards: list[list[TensorSpec]] = [[] for _ in range(count)]
    offset = 0
    for spec in specs:
        shards[min(count - 1, offset * count // total)].append(spec)
        offset += spec_nbytes(spec)
    return [s for s in shards if s]

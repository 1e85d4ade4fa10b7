"""Corrupt a converted checkpoint in place, the way real accidents do (tests only).

Tensor locations come from parsing the safetensors header here (8-byte length + JSON), not
from ckpt's catalog, so the helpers do not depend on the code under test.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from safetensors.torch import load_file, save_file

INDEX = "model.safetensors.index.json"


def locate(dst: Path, name: str) -> tuple[Path, int, int]:
    """(file, absolute begin, absolute end) of tensor ``name``: ``dst`` is an hf-layout output
    folder (found through its index) or one ``.safetensors`` file (a vllm-sharded rank part)."""
    if dst.is_file():
        path = dst
    else:
        path = dst / json.loads((dst / INDEX).read_text())["weight_map"][name]
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    begin, end = header[name]["data_offsets"]
    return path, 8 + n + begin, 8 + n + end


def read(dst: Path, name: str) -> bytes:
    path, begin, end = locate(dst, name)
    with open(path, "rb") as fh:
        fh.seek(begin)
        return fh.read(end - begin)


def write(dst: Path, name: str, data: bytes, offset: int = 0) -> None:
    path, begin, end = locate(dst, name)
    assert begin + offset + len(data) <= end
    with open(path, "r+b") as fh:
        fh.seek(begin + offset)
        fh.write(data)


def flip_bytes(dst: Path, name: str, offset: int, count: int) -> None:
    """XOR ``count`` bytes of ``name`` from byte ``offset`` with 0xFF."""
    old = read(dst, name)[offset : offset + count]
    write(dst, name, bytes(b ^ 0xFF for b in old), offset)


def add_to_byte(dst: Path, name: str, offset: int, delta: int) -> None:
    old = read(dst, name)[offset]
    write(dst, name, bytes([(old + delta) % 256]), offset)


def swap(dst: Path, a: str, b: str) -> None:
    """Exchange the bytes of two same-sized tensors."""
    da, db = read(dst, a), read(dst, b)
    assert len(da) == len(db)
    write(dst, a, db)
    write(dst, b, da)


def zero(dst: Path, name: str) -> None:
    write(dst, name, bytes(len(read(dst, name))))


def remove(dst: Path, names: list[str]) -> None:
    """Rewrite the files holding ``names`` without them, and drop them from the index."""
    index = json.loads((dst / INDEX).read_text())
    files = {index["weight_map"][n] for n in names}
    for rel in files:
        tensors = load_file(dst / rel)
        for n in names:
            tensors.pop(n, None)
        save_file(tensors, dst / rel, metadata={"format": "pt"})
    for n in names:
        del index["weight_map"][n]
    (dst / INDEX).write_text(json.dumps(index, indent=2))

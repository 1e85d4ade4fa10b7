"""``model.safetensors.index.json`` as a stream of chunks, never whole in memory.

The bytes are exactly ``json.dumps(doc, indent=2) + "\\n"`` of
``{"metadata": {"total_size": N}, "weight_map": {name: file, ...}}``, names sorted. Sorting
needs every output name at once, so they are held as sort keys only: each name's UTF-8 bytes in
one fixed-width numpy array, with its length, file and place in the file (a full-size R1 index,
92k names of at most ~60 bytes: ~7 MB while the index is written, no per-name object). Each
name is spelled again from its plan record when its line is written.

Example::

    size, sha = write_chunks_atomic(dst / INDEX_NAME, index_chunks(plan))
    # {
    #   "metadata": {
    #     "total_size": 15032385536
    #   },
    #   "weight_map": {
    #     "lm_head.weight": "model-00004-of-00004.safetensors",
    #     ...
"""

from __future__ import annotations

from collections.abc import Iterator
from json.encoder import encode_basestring_ascii as _json_str

import numpy as np

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.plan.model import Plan

#: weight_map lines joined into one chunk
BLOCK = 1024


def name_order(plan: Plan) -> tuple[np.ndarray, np.ndarray, int]:
    """The output tensors in name order (the order ``sorted`` gives the names), as numbers
    counting every file's tensors in plan order; the first number of each file (one more
    than the files: the last is the tensor count); the tensor bytes of them all.

    The key of a name is its UTF-8 bytes (``surrogatepass``: byte order is the code point
    order ``sorted`` uses), NUL-padded to the widest; the padding cannot tell ``"a"`` from
    ``"a\\x00"``, so the length breaks ties (the shorter sorts first, as in ``sorted``).
    """
    keys: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    total = 0
    for f in plan.files:
        raw = []
        for t in f.tensors:
            raw.append(t.name.encode("utf-8", "surrogatepass"))
            total += tensor_nbytes(t.dtype, tuple(t.shape))
        keys.append(np.array(raw, dtype=np.bytes_))
        lengths.append(np.fromiter(map(len, raw), np.int32, len(raw)))
    starts = np.cumsum([0, *map(len, lengths)])
    width = max([1, *(k.dtype.itemsize for k in keys)])
    key = np.empty(int(starts[-1]), f"S{width}")
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        key[a:b] = keys.pop(0)  # one array of keys; each file's own is let go once copied
    length = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
    return np.lexsort((length, key)), starts, total


def index_chunks(plan: Plan) -> Iterator[bytes]:
    """The index file's bytes, ``BLOCK`` weight_map lines a chunk."""
    order, starts, total = name_order(plan)
    yield f'{{\n  "metadata": {{\n    "total_size": {total}\n  }},\n  "weight_map": {{'.encode()
    if not len(order):
        yield b"}\n}\n"
        return
    files = plan.files
    values = [_json_str(f.name) for f in files]
    for a in range(0, len(order), BLOCK):
        block = order[a : a + BLOCK]
        file_of = np.searchsorted(starts, block, "right") - 1
        place = block - starts[file_of]
        lines = [
            f"    {_json_str(files[fi].tensors[k].name)}: {values[fi]}"
            for fi, k in zip(file_of.tolist(), place.tolist(), strict=True)
        ]
        yield (("\n" if a == 0 else ",\n") + ",\n".join(lines)).encode()
    yield b"\n  }\n}\n"

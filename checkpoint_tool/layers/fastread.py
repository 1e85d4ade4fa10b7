"""Read whole tensors of a local checkpoint straight into torch memory: one copy, no GIL.

``catalog.reader.read_tensor`` opens the shard, reads into a ``bytearray``, copies it to
``bytes`` and again into the tensor, holding the GIL for the copies; for the numeric check,
which reads a few hundred expert tensors of 7-22 MB per layer from several threads, that is the
bottleneck (0.9 GB/s on a 16-core host). Here the tensor is allocated first and ``os.preadv``
fills its bytes directly (the GIL is released for the whole read), and each shard's descriptor
stays open until ``close()``.

Example::

    reader = TensorReader(catalog)
    t = reader.read(catalog.get("model.layers.3.mlp.experts.0.gate_proj.weight"))
    t.dtype, t.shape     # (torch.uint8, torch.Size([2048, 3584]))
    reader.close()
"""

from __future__ import annotations

import torch

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.catalog.files import Files
from checkpoint_tool.catalog.reader import TORCH_STORAGE_DTYPE, entry_storage_shape, read_tensor


class TensorReader:
    """Whole tensors of ``catalog`` by entry; a remote catalog goes through ``read_tensor``."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._files = Files()

    def read(self, entry: TensorEntry) -> torch.Tensor:
        """The tensor in its storage dtype (as ``read_tensor``)."""
        if self.catalog.store is not None or entry.dtype not in TORCH_STORAGE_DTYPE:
            return read_tensor(self.catalog, entry)
        path = self.catalog.path_of(entry)
        n = entry.end - entry.begin
        out = torch.empty(n, dtype=torch.uint8)
        if n:
            self._files.read_into(path, memoryview(out.numpy()), entry.begin)  # type: ignore[arg-type]
        return out.view(TORCH_STORAGE_DTYPE[entry.dtype]).reshape(entry_storage_shape(entry))

    def close(self) -> None:
        self._files.close()

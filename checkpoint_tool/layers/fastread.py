"""Read whole tensors of a local checkpoint straight into torch memory: one copy, no GIL;
on a GPU, through small pinned staging buffers, each chunk's host-to-device copy overlapping
the read of the next.

``catalog.reader.read_tensor`` opens the shard, reads into a ``bytearray``, copies it to
``bytes`` and again into the tensor, holding the GIL for the copies; for the numeric check,
which reads a few hundred expert tensors of 7-22 MB per layer from several threads, that is the
bottleneck (0.9 GB/s on a 16-core host). Here the tensor is allocated first and ``os.preadv``
fills its bytes directly (the GIL is released for the whole read), and each shard's descriptor
stays open until ``close()``.

``read(entry, device="cuda")`` returns the tensor on the GPU: each reading thread owns two
pinned buffers of ``STAGE`` bytes and a copy stream; chunk k+1 is read while chunk k is copied
(pinned memory copies at the bus's rate, pageable memory through the driver's bounce buffer at
a fraction of it), and the stream is synchronized before the tensor is returned, so the caller
may use it on any stream. The tensor is allocated on the copy stream, so no block a pending
kernel of the default stream still reads is handed to it; a caller frees it only after its own
work on it finished (the numeric check ends each layer with a copy to the CPU).

Example::

    reader = TensorReader(catalog)
    t = reader.read(catalog.get("model.layers.3.mlp.experts.0.gate_proj.weight"))
    t.dtype, t.shape     # (torch.uint8, torch.Size([2048, 3584]))
    g = reader.read(catalog.get("model.layers.3.mlp.experts.0.gate_proj.weight"), "cuda")
    reader.close()
"""

from __future__ import annotations

import threading

import torch

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.catalog.files import Files
from checkpoint_tool.catalog.reader import TORCH_STORAGE_DTYPE, entry_storage_shape, read_tensor

#: bytes of one pinned staging buffer (two per reading thread)
STAGE = 8 << 20


class _Staging(threading.local):
    """One thread's pinned buffers, their copy-done events and its copy stream (lazily)."""

    def __init__(self) -> None:
        self.device: torch.device | None = None
        self.stream: torch.cuda.Stream | None = None
        self.buffers: list[torch.Tensor] = [torch.empty(0, dtype=torch.uint8)]
        self.events: list[torch.cuda.Event | None] = []

    def ready(self, device: torch.device) -> None:
        if self.device != device or self.buffers[0].numel() != STAGE:
            self.device = device
            self.stream = torch.cuda.Stream(device)
            self.buffers = [torch.empty(STAGE, dtype=torch.uint8, pin_memory=True) for _ in "ab"]
            self.events = [None, None]


class TensorReader:
    """Whole tensors of ``catalog`` by entry; a remote catalog goes through ``read_tensor``."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._files = Files()
        self._staging = _Staging()

    def read(self, entry: TensorEntry, device: str | torch.device | None = None) -> torch.Tensor:
        """The tensor in its storage dtype (as ``read_tensor``), on ``device`` (CPU: None)."""
        dev = torch.device(device) if device is not None else None
        if dev is not None and dev.type == "cpu":
            dev = None
        if self.catalog.store is not None or entry.dtype not in TORCH_STORAGE_DTYPE:
            t = read_tensor(self.catalog, entry)
            return t if dev is None else t.to(dev)
        n = entry.end - entry.begin
        if dev is None:
            out = torch.empty(n, dtype=torch.uint8)
            if n:
                self._read(entry, memoryview(out.numpy()), 0)  # type: ignore[arg-type]
        elif dev.type == "cuda":
            out = self._read_cuda(entry, n, dev)
        else:
            out = self.read(entry).to(dev)
        return out.view(TORCH_STORAGE_DTYPE[entry.dtype]).reshape(entry_storage_shape(entry))

    def _read(self, entry: TensorEntry, buf: memoryview, offset: int) -> None:
        self._files.read_into(self.catalog.path_of(entry), buf, entry.begin + offset)

    def _read_cuda(self, entry: TensorEntry, n: int, device: torch.device) -> torch.Tensor:
        st = self._staging
        st.ready(device)
        assert st.stream is not None
        with torch.cuda.stream(st.stream):  # a block no pending default-stream kernel uses
            out = torch.empty(n, dtype=torch.uint8, device=device)
        for k, offset in enumerate(range(0, n, STAGE)):
            i = k % 2
            event = st.events[i]
            if event is not None:
                event.synchronize()  # the copy out of this buffer is done
            m = min(STAGE, n - offset)
            buf = st.buffers[i]
            self._read(entry, memoryview(buf.numpy())[:m], offset)  # type: ignore[arg-type]
            with torch.cuda.stream(st.stream):
                out[offset : offset + m].copy_(buf[:m], non_blocking=True)
                event = torch.cuda.Event()
                event.record(st.stream)
            st.events[i] = event
        st.stream.synchronize()
        st.events = [None, None]
        return out

    def close(self) -> None:
        self._files.close()

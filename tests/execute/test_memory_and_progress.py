"""Bounded memory (Python allocations never scale with the tensor) and the progress renderers."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest
from rich.console import Console

from checkpoint_tool.catalog import open_local
from checkpoint_tool.catalog.safetensors_format import build_header
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.execute.progress import LineProgress, RichProgress
from checkpoint_tool.execute.runner import chunk_size
from checkpoint_tool.execute.source import RangeReader
from checkpoint_tool.execute.stream import TensorStream
from checkpoint_tool.execute.tree import build_node
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region

ROWS, COLS = 2048, 8192  # 16 MiB of U8


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    prefix, _ = build_header([("w", "U8", (ROWS, COLS))], {"format": "pt"})
    data = np.random.default_rng(7).integers(0, 256, ROWS * COLS, dtype=np.uint8)
    (root / "m.safetensors").write_bytes(prefix + data.tobytes())
    return open_local(root), data.reshape(ROWS, COLS)


class DiscardSink:
    """Counts bytes and keeps the first 16; one fixed buffer."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.total, self.first = capacity, 0, b""
        self._buf = bytearray(capacity)

    def reserve(self, nbytes: int) -> memoryview:
        return memoryview(self._buf)[:nbytes]

    def advance(self, nbytes: int) -> None:
        if not self.total:
            self.first = bytes(self._buf[:16])
        self.total += nbytes


@pytest.mark.parametrize(
    "out",
    [
        OutputTensor(name="copy", dtype="U8", shape=[ROWS, COLS], pieces=[Piece(source="w")]),
        OutputTensor(name="cols", dtype="U8", shape=[ROWS, COLS // 2 + 64], pieces=[Piece(
            source="w", slices=[Region(dim=1, start=COLS // 2, stop=COLS)],
            pads=[Pad(dim=1, amount=64, fill="00")])]),
        OutputTensor(name="cat", dtype="U8", shape=[ROWS, 2 * COLS], combine="concat", axis=1,
                     pieces=[Piece(source="w"), Piece(source="w")]),
    ],
    ids=["contiguous", "inner-region-pad", "concat-inner"],
)  # fmt: skip
def test_streaming_allocates_buffers_not_tensors(big, out):
    cat, data = big
    chunk = 1 << 20
    node = build_node(out, cat.tensors)
    with open_sources(cat, cat.files) as src:
        tracemalloc.start()
        sink = DiscardSink(chunk)
        TensorStream(RangeReader(src, chunk)).fill(node, sink)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert sink.total == np.prod(out.shape)
    assert sink.first == (data[0, COLS // 2 :] if out.name == "cols" else data[0]).tobytes()[:16]
    assert peak < 3 * chunk, f"peak {peak} bytes for a {sink.total}-byte tensor"


def test_chunk_size_follows_the_budget():
    assert chunk_size(1 << 30, 1) == 64 << 20
    assert chunk_size(64 << 20, 4) == 4 << 20
    from checkpoint_tool.errors import UsageError

    with pytest.raises(UsageError, match="too small"):
        chunk_size(1 << 20, 2)


def test_rich_progress_shows_bytes_rate_and_files():
    buf = io.StringIO()
    p = RichProgress(Console(file=buf, force_terminal=True, width=120))
    p.start(2_000_000, 2)
    p.advance(1_000_000)
    p.file_done("a.safetensors", 1_000_000)
    p.file_done("b.safetensors", 1_000_000, skipped=True)
    p.close()
    text = buf.getvalue()
    assert "2/2 files" in text and "2.0/2.0 MB" in text


def test_line_progress(capsys):
    p = LineProgress()
    p.start(3_000_000_000, 2)
    p.file_done("model-00001-of-00002.safetensors", 1_500_000_000)
    err = capsys.readouterr().err
    assert err.startswith("[1/2] model-00001-of-00002.safetensors  1.50 GB  (1.50 GB/3.00 GB, ")

"""``verify.expected`` rebuilds each output tensor's bytes from a plan, a segment at a time.

Checked against a whole-array numpy reference (slices, pads, concat, stack applied to the
complete source arrays, no row windows) for many segment sizes, and against what the executor
writes for the same hand-made plan (two implementations of the plan's semantics must agree).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.execute import execute_plan
from checkpoint_tool.plan.model import (
    OutputFile,
    OutputTensor,
    Pad,
    Piece,
    Plan,
    PlanOptions,
    Region,
)
from checkpoint_tool.verify.expected import TensorLayout
from checkpoint_tool.verify.lossless import check_lossless

DTYPES = {
    "U8": torch.uint8,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F8_E4M3": torch.float8_e4m3fn,
}


def _random(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    item = torch.empty(0, dtype=dtype).element_size()
    n = int(np.prod(shape)) * item
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen).view(dtype).reshape(shape)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("expected-src")
    g = torch.Generator().manual_seed(7)
    tensors = {
        "a": _random(g, (6, 10), torch.bfloat16),
        "b": _random(g, (6, 10), torch.bfloat16),
        "w": _random(g, (9, 8), torch.float8_e4m3fn),
        "s": _random(g, (3, 4), torch.float32),
        "packed": _random(g, (7, 5), torch.uint8),
        "vec": _random(g, (5,), torch.float32),
        "scalar": _random(g, (), torch.float32),
        "e3d": _random(g, (3, 4, 6), torch.bfloat16),
    }
    save_file(tensors, root / "model.safetensors", metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps({"model_type": "tiny"}))
    return root


def _bytes(t: torch.Tensor) -> np.ndarray:
    item = t.element_size()
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().reshape(*t.shape, item)


def _src(root: Path, name: str) -> np.ndarray:
    from safetensors.torch import load_file

    return _bytes(load_file(root / "model.safetensors")[name])


def _ref_piece(root: Path, p: Piece) -> np.ndarray:
    arr = _src(root, p.source)
    for r in p.slices:
        idx = [slice(None)] * arr.ndim
        idx[r.dim % (arr.ndim - 1)] = slice(r.start, r.stop)
        arr = arr[tuple(idx)]
    for pad in p.pads:
        fill = np.frombuffer(bytes.fromhex(pad.fill), np.uint8)
        shape = list(arr.shape)
        shape[pad.dim % (arr.ndim - 1)] = pad.amount
        arr = np.concatenate([arr, np.broadcast_to(fill, shape)], axis=pad.dim % (arr.ndim - 1))
    return arr


def _reference(root: Path, t: OutputTensor) -> bytes:
    parts = [_ref_piece(root, p) for p in t.pieces]
    if t.combine == "single":
        out = parts[0]
    elif t.combine == "concat":
        out = np.concatenate(parts, axis=t.axis)
    else:
        out = np.stack(parts, axis=t.axis)
    return out.tobytes()


CASES = [
    OutputTensor(name="rows_pad", dtype="BF16", shape=[5, 10], pieces=[
        Piece(source="a", slices=[Region(dim=0, start=2, stop=6)], pads=[Pad(dim=0, amount=1, fill="803f")])]),
    OutputTensor(name="cols_both", dtype="F8_E4M3", shape=[11, 5], pieces=[
        Piece(source="w", slices=[Region(dim=1, start=2, stop=8), Region(dim=1, start=1, stop=4)],
              pads=[Pad(dim=1, amount=2, fill="38"), Pad(dim=0, amount=2, fill="00")])]),
    OutputTensor(name="pad_order", dtype="F32", shape=[5, 6], pieces=[
        Piece(source="s", pads=[Pad(dim=0, amount=2, fill="0000803f"), Pad(dim=1, amount=2, fill="00000000")])]),
    OutputTensor(name="packed_slice", dtype="U8", shape=[4, 3], pieces=[
        Piece(source="packed", slices=[Region(dim=0, start=3, stop=7), Region(dim=-1, start=2, stop=5)])]),
    OutputTensor(name="concat0", dtype="BF16", shape=[7, 10], combine="concat", axis=0, pieces=[
        Piece(source="a", slices=[Region(dim=0, start=0, stop=3)]),
        Piece(source="b", slices=[Region(dim=0, start=3, stop=6)], pads=[Pad(dim=0, amount=1, fill="0000")])]),
    OutputTensor(name="concat1", dtype="BF16", shape=[6, 13], combine="concat", axis=1, pieces=[
        Piece(source="a", slices=[Region(dim=1, start=0, stop=5)]),
        Piece(source="b", pads=[Pad(dim=1, amount=3, fill="803f")], slices=[Region(dim=1, start=5, stop=10)])]),
    OutputTensor(name="stack0", dtype="BF16", shape=[2, 6, 10], combine="stack", axis=0, pieces=[
        Piece(source="a"), Piece(source="b")]),
    OutputTensor(name="stack1", dtype="BF16", shape=[3, 2, 10], combine="stack", axis=1, pieces=[
        Piece(source="a", slices=[Region(dim=0, start=0, stop=3)]),
        Piece(source="b", slices=[Region(dim=0, start=1, stop=4)])]),
    OutputTensor(name="expert_row", dtype="BF16", shape=[2, 6], pieces=[
        Piece(source="e3d", slices=[Region(dim=0, start=1, stop=2), Region(dim=1, start=2, stop=4)])]),
    OutputTensor(name="vec_pad", dtype="F32", shape=[8], pieces=[
        Piece(source="vec", pads=[Pad(dim=0, amount=3, fill="0000803f")])]),
    OutputTensor(name="scalar", dtype="F32", shape=[], pieces=[Piece(source="scalar")]),
]  # fmt: skip


@pytest.mark.parametrize("budget", [1, 7, 20, 64, 1 << 20])
@pytest.mark.parametrize("case", CASES, ids=lambda t: t.name)
def test_segments_equal_whole_array_reference(
    source: Path, case: OutputTensor, budget: int
) -> None:
    cat = open_catalog(source, headers_only=False)
    lookup = lambda n: (cat.tensors[n].dtype, cat.tensors[n].shape)  # noqa: E731

    def read(name: str, r0: int, r1: int) -> np.ndarray:
        return (
            _src(source, name)[r0:r1] if _src(source, name).ndim > 1 else _src(source, name)[None]
        )

    layout = TensorLayout(case, lookup)
    got, pos = bytearray(), 0
    for seg in layout.segments(read, budget):
        assert seg.start == pos  # contiguous, in order
        got += np.ascontiguousarray(seg.expected()).tobytes()
        pos = seg.stop
        labels = np.asarray(seg.labels()).reshape(-1)
        assert labels.size * layout.itemsize == seg.stop - seg.start
    assert bytes(got) == _reference(source, case)


def test_stack_rows_may_regroup_and_fill_constants(source: Path) -> None:
    cat = open_catalog(source, headers_only=False)
    lookup = lambda n: (cat.tensors[n].dtype, cat.tensors[n].shape)  # noqa: E731
    regroup = OutputTensor(name="w13", dtype="BF16", shape=[1, 12, 10], combine="stack", axis=0,
                           pieces=[Piece(source="a"), Piece(source="b")])  # fmt: skip
    read = lambda name, r0, r1: _src(source, name)[r0:r1]  # noqa: E731
    got = b"".join(
        np.ascontiguousarray(s.expected()).tobytes()
        for s in TensorLayout(regroup, lookup).segments(read, 30)
    )
    assert got == _src(source, "a").tobytes() + _src(source, "b").tobytes()
    const = OutputTensor(name="c", dtype="F32", shape=[3, 2], pieces=[], fill="0000803f")
    got = b"".join(
        np.ascontiguousarray(s.expected()).tobytes()
        for s in TensorLayout(const, lookup).segments(read, 8)
    )
    assert np.frombuffer(got, np.float32).tolist() == [1.0] * 6


def test_labels_name_source_and_padding(source: Path) -> None:
    cat = open_catalog(source, headers_only=False)
    lookup = lambda n: (cat.tensors[n].dtype, cat.tensors[n].shape)  # noqa: E731
    layout = TensorLayout(CASES[0], lookup)  # rows 2..6 of a, then one pad row
    (seg,) = layout.segments(lambda n, r0, r1: _src(source, n)[r0:r1], 1 << 20)
    labels = np.asarray(seg.labels()).reshape(5, 10)
    assert (labels[:4] == 0).all() and (labels[4] == 1).all()
    assert layout.origin(0).startswith("source a [2:6, 0:10]")
    assert layout.origin(1) == "padding of a (pad dim 0 +1 fill 803f)"


def test_agrees_with_the_executor(source: Path, tmp_path: Path) -> None:
    """The executor writes CASES; the lossless check (a separate implementation) passes it,
    and fails it once one byte of its output changes."""
    cat = open_catalog(source, headers_only=False)
    plan = Plan(
        ckpt_version="test",
        source=str(source),
        recipe="none",
        options=PlanOptions(),
        files=[OutputFile(name="out.safetensors", tensors=CASES)],
    )
    dst = tmp_path / "out"
    execute_plan(plan, cat, dst, progress=False)
    report = check_lossless(plan, cat, dst, budget=16)
    assert report.status == "passed", report.mismatches
    assert report.tensors_checked == len(CASES)
    data = bytearray((dst / "out.safetensors").read_bytes())
    data[-3] ^= 0x01  # inside the last tensor ("scalar" is sorted first; some tensor's byte)
    (dst / "out.safetensors").write_bytes(bytes(data))
    report = check_lossless(plan, cat, dst, budget=16)
    assert report.status == "failed"
    assert [m.kind for m in report.mismatches] == ["bytes_differ"]
    assert report.mismatches[0].elements_differ == 1

"""Node geometry and streaming: random plans and tiny buffers against an independent reference."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from checkpoint_tool.catalog import open_local
from checkpoint_tool.catalog.safetensors_format import storage_layout
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.execute.source import RangeReader
from checkpoint_tool.execute.stream import BufferSink, TensorStream
from checkpoint_tool.execute.tree import build_node
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region

from .helpers import expected_bytes, random_bytes

DTYPES = {1: ("U8", torch.uint8), 2: ("BF16", torch.bfloat16), 4: ("F32", torch.float32)}


def stream_bytes(cat, out: OutputTensor, chunk: int, capacity: int) -> bytes:
    node = build_node(out, cat.tensors)
    with open_sources(cat, cat.files) as src:
        sink = BufferSink(chunk)
        TensorStream(RangeReader(src, capacity)).fill(node, sink)
        return bytes(sink.data)


@st.composite
def plans(draw):
    """A random source tensor and an output tensor of 1-3 pieces cut from it."""
    itemsize = draw(st.sampled_from([1, 2, 4]))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 6)) for _ in range(rank)]
    combine = draw(st.sampled_from(["single", "concat", "stack"]))
    n = 1 if combine == "single" else draw(st.integers(1, 3))
    axis = (
        draw(st.integers(0, rank - 1 if combine == "concat" else rank))
        if n > 1 or combine != "single"
        else 0
    )
    extents = [draw(st.integers(1, s)) for s in shape]
    pads = [
        (draw(st.integers(-rank, rank - 1)), draw(st.integers(0, 3)), draw(st.binary(min_size=itemsize, max_size=itemsize)).hex())
        for _ in range(draw(st.integers(0, 2)))
    ]  # fmt: skip
    pieces = []
    for _ in range(n):
        ext = list(extents)
        if combine == "concat":
            ext[axis] = draw(st.integers(1, shape[axis]))
        regions = []
        for d in draw(st.permutations(list(range(rank)))):
            start = draw(st.integers(0, shape[d] - ext[d]))
            if draw(st.booleans()):  # two composed regions on one dim
                outer = draw(st.integers(start + ext[d], shape[d]))
                regions.append(Region(dim=d, start=start, stop=outer))
                regions.append(Region(dim=d - rank, start=0, stop=ext[d]))
            elif (start, ext[d]) != (0, shape[d]) or draw(st.booleans()):
                regions.append(Region(dim=d, start=start, stop=start + ext[d]))
        pieces.append(
            Piece(
                source="t", slices=regions, pads=[Pad(dim=d, amount=a, fill=f) for d, a, f in pads]
            )
        )
    chunk = draw(st.integers(itemsize, 300))
    capacity = draw(st.integers(itemsize, 300))
    return itemsize, shape, combine, axis, pieces, chunk, capacity, draw(st.integers(0, 2**16))


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans())
def test_random_plans_stream_the_reference_bytes(tmp_path_factory, case):
    itemsize, shape, combine, axis, pieces, chunk, capacity, seed = case
    dtype, tdtype = DTYPES[itemsize]
    src = random_bytes(torch.Generator().manual_seed(seed), tuple(shape), tdtype)
    root = tmp_path_factory.mktemp("ops")
    save_file({"t": src}, root / "m.safetensors")
    cat = open_local(root)
    probe = OutputTensor(name="o", dtype=dtype, shape=[], pieces=pieces, combine=combine, axis=axis)
    ref = expected_bytes(probe, {"t": src})
    out_shape = _reference_shape(probe, src)
    out = dataclasses.replace(probe, shape=out_shape)
    assert stream_bytes(cat, out, chunk, capacity) == ref


def _reference_shape(out: OutputTensor, src: torch.Tensor) -> list[int]:
    from checkpoint_tool.quant.codecs import apply_pad, apply_region

    parts = []
    for p in out.pieces:
        t = src.view(torch.uint8) if src.element_size() == 1 else src
        for r in p.slices:
            t = apply_region(t, r)
        for pad in p.pads:
            t = apply_pad(t, pad)
        parts.append(list(t.shape))
    if out.combine == "single":
        return parts[0]
    if out.combine == "stack":
        return [*parts[0][: out.axis], len(parts), *parts[0][out.axis :]]
    s = list(parts[0])
    s[out.axis] = sum(p[out.axis] for p in parts)
    return s


@pytest.fixture
def cat(tmp_path):
    g = torch.Generator().manual_seed(3)
    save_file(
        {
            "w": random_bytes(g, (6, 8), torch.bfloat16),
            "e3": random_bytes(g, (3, 4, 8), torch.uint8),
        },
        tmp_path / "m.safetensors",
    )
    return open_local(tmp_path)


def test_contiguity_of_row_regions_and_inner_regions(cat):
    rows = OutputTensor(name="a", dtype="BF16", shape=[2, 8],
                        pieces=[Piece(source="w", slices=[Region(dim=0, start=3, stop=5)])])  # fmt: skip
    entry = cat.tensors["w"]
    assert build_node(rows, cat.tensors).contiguous() == (
        entry.file,
        entry.begin + 3 * 16,
        entry.begin + 5 * 16,
    )
    cols = OutputTensor(name="b", dtype="BF16", shape=[6, 2],
                        pieces=[Piece(source="w", slices=[Region(dim=1, start=0, stop=2)])])  # fmt: skip
    assert build_node(cols, cat.tensors).contiguous() is None
    # one expert of a 3-D parameter, a few rows of it: still one range
    one = OutputTensor(name="c", dtype="U8", shape=[2, 8], pieces=[Piece(
        source="e3", slices=[Region(dim=0, start=1, stop=2), Region(dim=1, start=1, stop=3)])])  # fmt: skip
    e3 = cat.tensors["e3"]
    assert build_node(one, cat.tensors).contiguous() == (
        e3.file,
        e3.begin + 32 + 8,
        e3.begin + 32 + 24,
    )


def test_f4_counts_bytes_on_the_last_dim():
    assert storage_layout("F4", [8, 64]) == ((8, 32), 1)
    assert storage_layout("BF16", [8, 64]) == ((8, 64), 2)
    assert storage_layout("F32", []) == ((), 4)


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (OutputTensor(name="x", dtype="BF16", shape=[7, 8], pieces=[Piece(source="w")]), "plan says"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 8], pieces=[Piece(source="nope")]), "not in the source"),
        (OutputTensor(name="x", dtype="F32", shape=[6, 4], pieces=[Piece(source="w")]), "element size"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 8],
                      pieces=[Piece(source="w", slices=[Region(dim=1, start=4, stop=9)])]), "outside"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 8],
                      pieces=[Piece(source="w", slices=[Region(dim=2, start=0, stop=1)])]), "does not exist"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 9],
                      pieces=[Piece(source="w", pads=[Pad(dim=1, amount=1, fill="00")])]), "does not fit"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 16], combine="concat", axis=1,
                      pieces=[Piece(source="w"), Piece(source="w", slices=[Region(dim=0, start=0, stop=5)])]),
         "cannot concat"),
        (OutputTensor(name="x", dtype="BF16", shape=[6, 8], pieces=[]), "no source pieces"),
    ],
)  # fmt: skip
def test_inconsistent_plans_fail_with_one_line(cat, out, message):
    with pytest.raises(InputError, match=message) as err:
        build_node(out, cat.tensors)
    assert "\n" not in err.value.message and out.name in err.value.message

"""``read_header``'s fast path for well-formed entries accepts and refuses exactly what the
strict per-entry checks (``_parse_entry`` + ``_check_no_overlap``) accept and refuse."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from checkpoint_tool.catalog.safetensors_format import (
    TensorHeader,
    _check_no_overlap,
    _parse_entry,
    read_header,
)
from checkpoint_tool.errors import InputError

DATA_LEN = 64
GOOD = {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}

#: one entry each; some valid only through the slow path (bool dims), most invalid
ODD_ENTRIES = [
    {"dtype": "BF16", "shape": [True, 3], "data_offsets": [0, 6]},  # bool dims are ints
    {"dtype": "U8", "shape": [], "data_offsets": [0, 1]},  # 0-d
    {"dtype": "U8", "shape": [0, 5], "data_offsets": [7, 7]},  # empty
    {"dtype": "F4", "shape": [3, 3], "data_offsets": [0, 5]},  # sub-byte, rounded up
    {"dtype": "BF16", "shape": [2.0, 3], "data_offsets": [0, 12]},
    {"dtype": "BF16", "shape": [-2, -3], "data_offsets": [0, 12]},
    {"dtype": "BF16", "shape": "23", "data_offsets": [0, 12]},
    {"dtype": "BF16", "shape": {}, "data_offsets": [0, 2]},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": "ab"},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12, 12]},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0.0, 12]},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": [12, 0]},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": [60, 72]},
    {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]},
    {"dtype": "BF17", "shape": [2, 3], "data_offsets": [0, 12]},
    {"dtype": None, "shape": [2, 3], "data_offsets": [0, 12]},
    {"shape": [2, 3], "data_offsets": [0, 12]},
    {"dtype": "BF16", "data_offsets": [0, 12]},
    {"dtype": "BF16", "shape": [2, 3]},
    [1, 2],
    "BF16",
    None,
]


def _write(path: Path, doc: dict, data_len: int = DATA_LEN) -> Path:
    raw = json.dumps(doc).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\x01" * data_len)
    return path


def _strict(path: Path, doc: dict, data_len: int = DATA_LEN) -> dict[str, TensorHeader]:
    """The reference: every entry through the strict checks, then the overlap check."""
    raw_len = len(json.dumps(doc).encode())
    start = 8 + raw_len
    tensors = {n: _parse_entry(path, n, info, start, data_len) for n, info in doc.items()}
    _check_no_overlap(path, tensors)
    return tensors


def _outcome(fn):
    try:
        return "ok", fn()
    except InputError as exc:
        return "error", exc.message
    except Exception as exc:  # the strict path's own failures must be kept too
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("odd", ODD_ENTRIES, ids=[str(i) for i in range(len(ODD_ENTRIES))])
def test_each_odd_entry_gets_the_strict_verdict(tmp_path, odd):
    doc = {"z.first": {"dtype": "U8", "shape": [4], "data_offsets": [40, 44]}, "a.odd": odd}
    path = _write(tmp_path / "m.safetensors", doc)
    got = _outcome(lambda: read_header(path).tensors)
    assert got == _outcome(lambda: _strict(path, doc))


def test_well_formed_header_matches_the_strict_parse(tmp_path):
    doc = {
        "b": {"dtype": "F8_E4M3", "shape": [4, 4], "data_offsets": [16, 32]},
        "a": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]},
        "c": {"dtype": "F32", "shape": [], "data_offsets": [32, 36]},
        "e": {"dtype": "U8", "shape": [0], "data_offsets": [36, 36]},
        "d": {"dtype": "F4", "shape": [4, 8], "data_offsets": [36, 52]},
    }
    path = _write(tmp_path / "m.safetensors", doc)
    header = read_header(path)
    assert header.tensors == _strict(path, doc)
    assert [e[0] for e in header.entries] == list(doc)  # header order kept
    assert all(isinstance(e[2], tuple) for e in header.entries)


@pytest.mark.parametrize(
    "spans",
    [
        [(0, 8), (4, 12)],  # partial
        [(0, 8), (0, 8)],  # identical ranges: which pair is named depends on header order
        [(8, 16), (0, 24)],  # one inside another
        [(0, 8), (8, 8), (8, 16)],  # an empty tensor between neighbours is no overlap
        [(0, 8), (4, 4), (8, 16)],  # nor inside one
    ],
)
def test_overlap_verdict_and_message_match(tmp_path, spans):
    doc = {
        f"t{i}": {"dtype": "U8", "shape": [e - b], "data_offsets": [b, e]}
        for i, (b, e) in enumerate(spans)
    }
    path = _write(tmp_path / "m.safetensors", doc)
    got = _outcome(lambda: read_header(path).tensors)
    assert got == _outcome(lambda: _strict(path, doc))

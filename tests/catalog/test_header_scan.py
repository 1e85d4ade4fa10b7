"""The compact-header scan (``catalog.header_scan``) gives exactly what the JSON reader gives,
or steps aside: on real writers' headers it takes over, and on anything else (escapes, spaces,
other key orders, duplicates, faults) ``parse_header`` and ``parse_json_header`` agree, to
the columns, the metadata and the error message."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save

from checkpoint_tool.catalog.header_scan import scan_header
from checkpoint_tool.catalog.safetensors_format import (
    DTYPE_BITS,
    DTYPE_CODES,
    build_header,
    parse_header,
    parse_json_header,
    tensor_nbytes,
)
from checkpoint_tool.errors import InputError

from .test_header_fast_path import ODD_ENTRIES


def _both(raw: bytes, data_len: int):
    """``parse_header`` and ``parse_json_header`` of ``raw`` (a header of a file with
    ``data_len`` bytes of data): each a ``FileHeader`` or the ``InputError`` message."""
    out = []
    for parse in (parse_header, parse_json_header):
        try:
            out.append(parse("shard.safetensors", len(raw), raw, 8 + len(raw) + data_len))
        except InputError as exc:
            out.append(exc.message)
    return out


def _scan(raw: bytes, data_len: int):
    return scan_header(raw, 8 + len(raw), data_len, DTYPE_BITS, DTYPE_CODES)


def _header_bytes(blob: bytes) -> bytes:
    return blob[8 : 8 + int.from_bytes(blob[:8], "little")]


def test_the_safetensors_writer_takes_the_scan_with_the_same_result():
    rng = np.random.default_rng(7)
    tensors = {
        "model.layers.0.mlp.experts.3.down_proj.weight": rng.integers(0, 255, (4, 6), np.uint8),
        "model.layers.0.mlp.experts.3.down_proj.weight_scale": rng.random((4, 1), np.float32),
        "lm_head.weight": rng.random((5, 3)).astype(np.float16),
        "é.ñame": rng.random(()).astype(np.float64),
        "empty": np.zeros((0, 3), np.int32),
    }
    blob = save(tensors, metadata={"format": "pt", "note": 'a "quoted" value'})
    raw = _header_bytes(blob)
    data_len = len(blob) - 8 - len(raw)
    assert _scan(raw, data_len) is not None
    fast, careful = _both(raw, data_len)
    assert fast == careful
    assert fast.metadata == {"format": "pt", "note": 'a "quoted" value'}
    assert fast.columns.count == len(tensors)


def test_ckpts_own_writer_takes_the_scan():
    specs = [("a.weight", "F4", (6, 8)), ("a.weight_scale", "F8_E8M0", (6, 1))]
    raw = _header_bytes(build_header(specs, {"format": "pt"})[0])
    data_len = sum(tensor_nbytes(d, s) for _, d, s in specs)
    assert _scan(raw, data_len) is not None
    fast, careful = _both(raw, data_len)
    assert fast == careful


@pytest.mark.parametrize("odd", range(len(ODD_ENTRIES)))
def test_odd_entries_in_the_compact_form_get_the_json_verdict(odd):
    doc = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": ODD_ENTRIES[odd]}
    raw = json.dumps(doc, separators=(",", ":")).encode()
    fast, careful = _both(raw, 64)
    assert fast == careful


# -- random headers, in the compact form and around it --

PLAIN_NAMES = st.from_regex(r"[a-z_.0-9]{1,12}|é[a-z]{0,3}", fullmatch=True)
ODD_NAMES = st.one_of(
    st.text(min_size=0, max_size=6),  # quotes, backslashes, line breaks, surrogates, unicode
    st.sampled_from(["__metadata__", "a\n", 'a"b', "a\\b", "\x1f", "\ud800", ""]),
)
#: what a header may do differently from the writers' form (one per header, or none)
DEVIATIONS = [None] * 6 + [
    "begin",
    "end",
    "data_len",
    "name",
    "dtype",
    "key_order",
    "spaces",
    "ascii_escapes",
    "metadata_last",
    "metadata_null",
    "metadata_text",
    "metadata_odd_value",
    "leading_space",
    "duplicate",
    "big_rank",
]


@st.composite
def headers(draw):
    """A header's bytes and the data length of its file: the writers' form (entries back to
    back, compact, keys in their order, metadata first or absent, space padding), or that
    form with one deviation: an offset a byte off, a byte past the end, an odd name or
    dtype, another key order, spaces, escapes, metadata elsewhere or odd, a duplicate, a
    rank over 255."""
    deviation = draw(st.sampled_from(DEVIATIONS))
    count = draw(st.integers(1 if deviation else 0, 5))
    odd = draw(st.integers(0, count - 1)) if count else 0  # the entry that deviates
    entries, offset = [], 0
    for k in range(count):
        name = draw(ODD_NAMES if deviation == "name" and k == odd else PLAIN_NAMES)
        dtype = (
            draw(st.sampled_from(["BF17", "bf16"]))
            if deviation == "dtype" and k == odd
            else draw(st.sampled_from(list(DTYPE_BITS)))
        )
        shape = (
            [1] * 256
            if deviation == "big_rank" and k == odd
            else draw(st.lists(st.integers(0, 5), max_size=3))
        )
        size = tensor_nbytes(dtype, shape) if dtype in DTYPE_BITS else 2
        begin = offset + (
            draw(st.sampled_from([-1, 1])) if deviation == "begin" and k == odd else 0
        )
        end = (
            begin
            + size
            + (draw(st.sampled_from([-1, 1])) if deviation == "end" and k == odd else 0)
        )
        offset = max(offset, end)
        info = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
        if deviation == "key_order" and k == odd:
            info = dict(reversed(list(info.items())))
        entries.append((name, info))
    if deviation == "duplicate":
        entries.append(entries[odd])
    data_len = max(offset + (-1 if deviation == "data_len" else draw(st.sampled_from([0, 3]))), 0)
    metadata: object = draw(st.sampled_from(["absent", {"format": "pt"}, {}]))
    if deviation == "metadata_null":
        metadata = None
    elif deviation == "metadata_text":
        metadata = "text"
    elif deviation == "metadata_odd_value":
        metadata = {"k": draw(st.sampled_from([1, None, [1], "é", "\ud800"]))}
    parts = (
        [] if metadata == "absent" or deviation == "metadata_last" else [("__metadata__", metadata)]
    )
    parts += entries
    if deviation == "metadata_last":
        parts.append(("__metadata__", {"format": "pt"}))
    colon, sep = (": ", (", ", ": ")) if deviation == "spaces" else (":", (",", ":"))
    ascii_only = deviation == "ascii_escapes"
    body = ",".join(
        json.dumps(k, ensure_ascii=ascii_only)
        + colon
        + json.dumps(v, separators=sep, ensure_ascii=ascii_only)
        for k, v in parts
    )
    raw = ("{" + body + "}").encode("utf-8", "surrogatepass")
    raw += b" " * draw(st.sampled_from([0, 3]))
    if deviation == "leading_space":
        raw = b" " + raw
    return raw, data_len


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers())
def test_the_scan_gives_the_json_result_or_steps_aside(case):
    raw, data_len = case
    fast, careful = _both(raw, data_len)
    assert fast == careful
    scanned = _scan(raw, data_len)
    if scanned is not None:  # it takes only headers JSON reads, overlaps left to the caller
        if isinstance(careful, str):
            assert "overlap" in careful
            return
        assert scanned.text == careful.columns.text
        assert (scanned.begins, scanned.ends) == (careful.columns.begins, careful.columns.ends)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[A-Za-z0-9_.\-é]{1,20}", fullmatch=True),
            st.sampled_from(list(DTYPE_BITS)),
            st.lists(st.integers(0, 300), max_size=4),
        ),
        min_size=1,
        max_size=30,
        unique_by=lambda t: t[0],
    ),
    st.booleans(),
)
def test_a_writers_header_always_takes_the_scan(specs, with_metadata):
    """Every header in the form the writers produce is read by the scan (so the fast path is
    what the tests above compare, not a path that always steps aside)."""
    doc: dict = {"__metadata__": {"format": "pt"}} if with_metadata else {}
    offset = 0
    for name, dtype, shape in specs:
        size = tensor_nbytes(dtype, shape)
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"   "
    scanned = _scan(raw, offset)
    assert scanned is not None and scanned.count == len(specs)
    fast, careful = _both(raw, offset)
    assert fast == careful

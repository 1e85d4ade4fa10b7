"""inspect reads headers and JSON side files only, never tensor data."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.policy import build_policy


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar line")


def test_no_tensor_reader_is_called(monkeypatch, synth_ckpt):
    import checkpoint_tool.catalog.catalog as catalog
    import checkpoint_tool.catalog.reader as reader

    def forbidden(*args, **kwargs):
        raise AssertionError("inspect must not read tensor data")

    for fn in ("read_tensor", "read_rows"):
        monkeypatch.setattr(reader, fn, forbidden)
    monkeypatch.setattr(catalog, "read_range", forbidden)  # Catalog.read_bytes of a local shard
    report = build_policy(open_catalog(synth_ckpt("quark-hybrid")), tp=2)
    assert report.moe_layers


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_bytes_read_are_headers_and_json(synth_ckpt):
    # fewer than header_pool's MIN_FILES shards: the forked header reader's pipe would count
    # in rchar too (it carries parsed headers, not tensor data)
    src = synth_ckpt("quark-mxfp4", shards=8)
    json_bytes = sum(p.stat().st_size for p in src.glob("*.json"))
    data = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    build_policy(open_catalog(src), tp=2)  # imports + the engine rule table, read once
    before = _rchar()
    cat = open_catalog(src)
    build_policy(cat, tp=2)
    read = _rchar() - before
    assert len(cat.files) > 1
    # headers + JSON side files, and a little slack for what Python itself reads (stat, locale)
    assert read <= cat.header_bytes_read + json_bytes + 64 * 1024
    assert read < data / 4, (read, data)

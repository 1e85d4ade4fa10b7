"""Catalog: layouts, byte ranges, index consistency, hub sources (offline, fake cache)."""

from __future__ import annotations

import json
import shutil

import huggingface_hub.constants as hf_constants
import pytest
import torch

from catalog.producer_ckpt import producer_fixture, quark_checkpoint
from checkpoint_tool.catalog import INDEX_NAME, open_catalog, read_rows, read_tensor
from checkpoint_tool.catalog.index import IndexListing
from checkpoint_tool.errors import InputError

STEM = "mxfp4-global_ptpc-fp8-attn"


def test_index_layout_byte_ranges_and_reads(tmp_path):
    root = quark_checkpoint(tmp_path / "q", STEM, shards=3, seed=7)
    cat = open_catalog(root)
    _, tensors = producer_fixture(STEM)
    assert set(cat.tensors) == set(tensors) and len(cat.files) == 3
    index = json.loads((root / INDEX_NAME).read_text())["weight_map"]
    for name, e in cat.tensors.items():
        assert e.file == index[name]
        raw = (root / e.file).read_bytes()[e.begin : e.end]
        t = read_tensor(cat, e)
        assert t.reshape(-1).view(torch.uint8).numpy().tobytes() == raw
    e = cat.get("model.layers.0.self_attn.kv_b_proj.weight")  # F8_E4M3 [256, 32]
    rows = read_rows(cat, e, 10, 20)
    assert rows.shape == (10, 32)
    assert torch.equal(rows.view(torch.uint8), read_tensor(cat, e)[10:20].view(torch.uint8))
    assert cat.header_bytes_read == sum(8 + h.header_len for h in cat.headers.values())
    assert cat.config["quantization_config"]["quant_method"] == "quark"


def test_folder_without_index_and_single_file(tmp_path):
    root = quark_checkpoint(tmp_path / "q", STEM, shards=2)
    (root / INDEX_NAME).unlink()
    cat = open_catalog(root)
    assert len(cat.tensors) == len(producer_fixture(STEM)[1]) and cat.index is None
    one = open_catalog(root / cat.files[0])
    assert one.files == [cat.files[0]] and set(one.tensors) < set(cat.tensors)
    assert one.config is not None  # the folder's config.json is used


def test_duplicate_tensor_across_shards_is_refused(tmp_path):
    root = quark_checkpoint(tmp_path / "q", STEM, shards=2)
    (root / INDEX_NAME).unlink()
    shutil.copy(
        root / "model-00001-of-00002.safetensors", root / "model-00003-of-00003.safetensors"
    )
    with pytest.raises(InputError, match="duplicate tensors across shards"):
        open_catalog(root)


def test_stale_index_is_refused(tmp_path):
    root = quark_checkpoint(tmp_path / "q", STEM, shards=2)
    index = json.loads((root / INDEX_NAME).read_text())
    name = "model.norm.weight"
    index["weight_map"][name] = next(
        f for f in set(index["weight_map"].values()) if f != index["weight_map"][name]
    )
    (root / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(InputError, match="stale"):
        open_catalog(root)


def test_index_listing_keeps_names_files_and_order():
    weight_map = {"b.weight": "s2", "a.weight": "s1", "c.weight": "s2"}
    index = {"metadata": {"total_size": 6}, "weight_map": dict(weight_map)}
    listing = IndexListing.take(index)
    assert index == {"metadata": {"total_size": 6}}  # the names live on in the listing only
    assert listing.name_list() == list(weight_map) and len(listing) == 3
    assert [listing.files[i] for i in listing.file_ids] == list(weight_map.values())
    # a name holding the joining character: kept as a list, still exact
    odd = {"x\ny.weight": "s1", "z.weight": "s1"}
    assert IndexListing.take({"weight_map": dict(odd)}).name_list() == list(odd)


def test_index_naming_a_tensor_the_shards_lack_is_refused(tmp_path):
    root = quark_checkpoint(tmp_path / "q", STEM, shards=2)
    index = json.loads((root / INDEX_NAME).read_text())
    index["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"
    (root / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(InputError, match=r"'model\.ghost\.weight' is listed in .* not in the shard"):
        open_catalog(root)
    cat_index = open_catalog(quark_checkpoint(tmp_path / "r", STEM, shards=2)).index
    assert cat_index is not None and "weight_map" not in cat_index


def test_pickles_are_never_read(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(InputError, match="never unpickles"):
        open_catalog(tmp_path)
    with pytest.raises(InputError, match=r"safetensors only \(never pickles\)"):
        open_catalog(tmp_path / "pytorch_model.bin")


def test_hub_source_offline_from_the_cache(tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--amd--tiny-mxfp4"
    snapshot = repo / "snapshots" / commit
    quark_checkpoint(snapshot, STEM, shards=2)
    # like the real cache: snapshot files are symlinks to ../../blobs/<hash>
    (repo / "blobs").mkdir(parents=True)
    for i, f in enumerate(sorted(snapshot.iterdir())):
        blob = repo / "blobs" / f"blob{i:04d}"
        f.rename(blob)
        f.symlink_to(f"../../blobs/{blob.name}")
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    # the source is named by repo id, the revision resolved to the cached commit (docs/remote.md)
    for source in ("amd/tiny-mxfp4", "hf://amd/tiny-mxfp4@main", f"hf://amd/tiny-mxfp4@{commit}"):
        cat = open_catalog(source)
        assert cat.root.name == commit and cat.revision == commit
        assert cat.source == "hf://amd/tiny-mxfp4" and cat.store is None  # read locally
        assert len(cat.tensors) == len(producer_fixture(STEM)[1])
    with pytest.raises(InputError, match="hf://amd/missing@main: HF_HUB_OFFLINE is set and the "):
        open_catalog("amd/missing")


def test_missing_source_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        open_catalog(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no \*\.safetensors files"):
        open_catalog(tmp_path / "empty")

"""End-to-end executor runs on a hand-made plan: lossless bytes, files, index, manifest."""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch
from safetensors import safe_open

from checkpoint_tool.catalog import open_local
from checkpoint_tool.execute import execute_plan, hashed_output, read_manifest
from checkpoint_tool.execute.manifest import JOURNAL_NAME, MANIFEST_NAME

from .helpers import (
    expected_bytes,
    read_output,
    tiny_moe_tensors,
    tiny_plan,
    tree_bytes,
    write_source,
)


@pytest.fixture
def source(tmp_path):
    tensors = tiny_moe_tensors(seed=1)
    root = write_source(tmp_path / "src", tensors)
    return root, tensors


def test_every_tensor_equals_its_source_slice(source, tmp_path):
    root, tensors = source
    plan = tiny_plan(root)
    report = execute_plan(plan, open_local(root), tmp_path / "dst", progress=False)
    got = read_output(tmp_path / "dst")
    planned = {t.name: t for f in plan.files for t in f.tensors}
    assert set(got) == set(planned)
    for name, out in planned.items():
        assert got[name] == expected_bytes(out, tensors), name
    assert report.files_written == 3 and report.files_kept == 0
    assert report.tensor_count == len(planned)


def test_padding_is_zero_weights_and_neutral_scales(source, tmp_path):
    root, _ = source
    execute_plan(tiny_plan(root), open_local(root), tmp_path / "dst", progress=False)
    cat = open_local(tmp_path / "dst")
    from checkpoint_tool.catalog import read_tensor

    gate = read_tensor(cat, "model.layers.1.mlp.experts.2.gate_proj.weight").view(torch.uint8)
    assert gate[-2:].eq(0).all()  # two zero rows appended
    scale = read_tensor(cat, "model.layers.1.mlp.experts.2.down_proj.weight_scale_inv")
    assert scale[:, 1].eq(1.0).all() and scale[-1].eq(1.0).all()


def test_output_is_valid_safetensors_with_format_pt(source, tmp_path):
    root, _ = source
    plan = tiny_plan(root)
    execute_plan(plan, open_local(root), tmp_path / "dst", progress=False)
    for f in plan.files:
        with safe_open(tmp_path / "dst" / f.name, framework="pt") as fh:
            assert fh.metadata() == {"format": "pt"}
            assert list(fh.keys()) == sorted(t.name for t in f.tensors)


def test_index_config_side_files_and_manifest(source, tmp_path):
    root, _ = source
    plan = tiny_plan(root)
    dst = tmp_path / "dst"
    execute_plan(plan, open_local(root), dst, progress=False)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    cat = open_local(dst)
    assert index["metadata"]["total_size"] == sum(e.nbytes for e in cat.tensors.values())
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    assert json.loads((dst / "config.json").read_text())["ckpt_test"] is True
    assert (dst / "tokenizer.json").read_bytes() == (root / "tokenizer.json").read_bytes()
    assert (dst / "sub/chat_template.jinja").read_bytes() == (
        root / "sub/chat_template.jinja"
    ).read_bytes()
    assert not (dst / JOURNAL_NAME).exists()
    assert not list(dst.rglob("*.partial"))
    m = read_manifest(dst)
    import hashlib

    for rec in [*m.files, *m.other_files]:
        data = (dst / rec.name).read_bytes()
        assert rec.size == len(data) and rec.sha256 == hashlib.sha256(data).hexdigest()
    assert {r.name for r in m.other_files} == {
        "config.json", "model.safetensors.index.json", "tokenizer.json", "sub/chat_template.jinja"
    }  # fmt: skip
    assert [s.name for s in m.source_files] == sorted(p.name for p in root.glob("*.safetensors"))
    assert all(s.sha256 is None and len(s.header_sha256) == 64 for s in m.source_files)
    assert m.total_size == index["metadata"]["total_size"]
    assert m.dropped[0].name == "x" and m.recipe == "hand-made"
    assert "time" not in (dst / MANIFEST_NAME).read_text()


def test_hash_source_records_full_sha256(source, tmp_path):
    import hashlib

    root, _ = source
    execute_plan(
        tiny_plan(root), open_local(root), tmp_path / "dst", progress=False, hash_source=True
    )
    m = read_manifest(tmp_path / "dst")
    assert m.source_hashing == "full"
    for s in m.source_files:
        assert s.sha256 == hashlib.sha256((root / s.name).read_bytes()).hexdigest()


@pytest.mark.parametrize("zero_copy_min", [64, 1 << 30])
def test_zero_copy_and_staged_paths_give_the_same_bytes(
    source, tmp_path, monkeypatch, zero_copy_min
):
    """Runs of adjacent source ranges copied by the kernel (hashed from the mapping, in several
    windows) or staged through the buffers: same files, same manifest."""
    root, tensors = source
    plan = tiny_plan(root)
    execute_plan(plan, open_local(root), tmp_path / "ref", progress=False)
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", zero_copy_min)
    monkeypatch.setattr(hashed_output, "MAX_RUN", 300)
    execute_plan(plan, open_local(root), tmp_path / "dst", progress=False, memory_budget=4 << 20)
    assert tree_bytes(tmp_path / "ref") == tree_bytes(tmp_path / "dst")
    got = read_output(tmp_path / "dst")
    for f in plan.files:
        for t in f.tensors:
            assert got[t.name] == expected_bytes(t, tensors), t.name


def test_copy_file_range_refused_falls_back(source, tmp_path, monkeypatch):
    """Another file system (EXDEV) or an old kernel: pread + pwrite, same bytes."""
    root, _ = source
    plan = tiny_plan(root)
    execute_plan(plan, open_local(root), tmp_path / "ref", progress=False)
    monkeypatch.setattr(hashed_output, "ZERO_COPY_MIN", 64)

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    execute_plan(plan, open_local(root), tmp_path / "dst", progress=False)
    assert tree_bytes(tmp_path / "ref") == tree_bytes(tmp_path / "dst")


@pytest.mark.parametrize("workers", [2, 3])
def test_deterministic_for_any_worker_count_and_budget(source, tmp_path, workers):
    root, _ = source
    plan = tiny_plan(root)
    execute_plan(plan, open_local(root), tmp_path / "one", progress=False)
    execute_plan(
        plan, open_local(root), tmp_path / "many", progress=False, workers=workers,
        memory_budget=4 * workers << 20,
    )  # fmt: skip
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "many")


def test_plain_progress_lines(source, tmp_path, capsys):
    root, _ = source
    execute_plan(tiny_plan(root), open_local(root), tmp_path / "dst", progress=True)
    err = capsys.readouterr().err
    assert "[1/3]" in err and "[3/3]" in err and "model-00002-of-00003.safetensors" in err


def test_no_fsync_writes_the_same_bytes_and_manifest_without_fsync(source, tmp_path, monkeypatch):
    """durable=False (``--no-fsync``) changes nothing in the output, only skips the fsyncs (and
    the early write-back); the default run fsyncs files and folders."""
    from checkpoint_tool.execute import writer

    root, _ = source
    plan = tiny_plan(root)
    monkeypatch.setattr(writer, "DURABLE", True)  # the conftest turns it off for speed
    calls: list[int] = []
    kicks: list[int] = []
    real_fsync, real_kick = os.fsync, hashed_output._start_writeback
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(hashed_output, "_start_writeback", lambda *a: (kicks.append(1), real_kick(*a))[1])  # fmt: skip
    durable = execute_plan(plan, open_local(root), tmp_path / "durable", progress=False)
    assert durable.durable and len(calls) >= len(plan.files) and kicks
    calls.clear(), kicks.clear()
    fast = execute_plan(plan, open_local(root), tmp_path / "fast", progress=False, durable=False)
    assert not fast.durable and calls == [] and kicks == []
    assert tree_bytes(tmp_path / "durable") == tree_bytes(tmp_path / "fast")
    assert fast.manifest_sha256 == durable.manifest_sha256

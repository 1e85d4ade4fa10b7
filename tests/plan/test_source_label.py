"""Outputs name their source by content, never by a local path: the same source converted
from two folders gives byte-identical outputs, manifest included."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.cli.app import main
from checkpoint_tool.plan.source_label import source_label


def _convert(monkeypatch, src: Path, dst: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["ckpt", "convert", str(src), str(dst), "--tp", "2",
                                      "--no-progress", "--no-fsync"])  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main()
    assert not exc.value.code


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_same_source_from_two_folders_gives_the_same_bytes(monkeypatch, synth_ckpt, tmp_path):
    src = synth_ckpt("deepseek-v3-fp8")
    a = tmp_path / "one" / "model"
    b = tmp_path / "two" / "deeper" / "copy"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    monkeypatch.chdir(tmp_path / "one")
    _convert(monkeypatch, Path("model"), tmp_path / "out-a")  # a relative path
    _convert(monkeypatch, b, tmp_path / "out-b")  # an absolute one
    out_a, out_b = _files(tmp_path / "out-a"), _files(tmp_path / "out-b")
    assert out_a.keys() == out_b.keys() and "ckpt-manifest.json" in out_a
    assert out_a == out_b
    for data in out_a.values():
        assert str(tmp_path).encode() not in data and b"/one/" not in data


def test_label_is_a_content_hash_that_follows_the_content(synth_ckpt, tmp_path):
    src = synth_ckpt("deepseek-v3-fp8")
    label = source_label(open_catalog(src))
    assert label.startswith("sha256:") and len(label) == len("sha256:") + 64
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert source_label(open_catalog(copy)) == label
    config = copy / "config.json"
    config.write_text(config.read_text().replace('"hidden_size"', '"hidden_size" ', 1))
    assert source_label(open_catalog(copy)) != label  # other config bytes, other source


def test_a_hub_source_is_named_by_its_repo_id():
    from checkpoint_tool.catalog.catalog import Catalog

    cat = Catalog(root=Path("/nonexistent-cache/x"), tensors={}, files=[], source="hf://org/name@v1")
    assert source_label(cat) == "hf://org/name"

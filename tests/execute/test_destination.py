"""DST policy: refuse non-empty without a flag; --overwrite only replaces ckpt outputs."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute import execute_plan

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source


@pytest.fixture
def setup(tmp_path):
    root = write_source(tmp_path / "src", tiny_moe_tensors(seed=2))
    plan = tiny_plan(root)
    return root, plan, open_local(root)


def test_non_empty_dst_is_refused_and_untouched(setup, tmp_path):
    _, plan, cat = setup
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "keep.txt").write_text("x")
    with pytest.raises(OutputError, match=r"--resume .* --overwrite") as err:
        execute_plan(plan, cat, dst, progress=False)
    assert "\n" not in err.value.message
    assert tree_bytes(dst) == {"keep.txt": b"x"}


def test_empty_existing_dst_is_fine(setup, tmp_path):
    _, plan, cat = setup
    (tmp_path / "dst").mkdir()
    execute_plan(plan, cat, tmp_path / "dst", progress=False)
    assert (tmp_path / "dst" / "ckpt-manifest.json").exists()


def test_dst_that_is_a_file_is_refused(setup, tmp_path):
    _, plan, cat = setup
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        execute_plan(plan, cat, tmp_path / "f", progress=False)


def test_overwrite_replaces_a_previous_output_and_removes_its_stale_files(setup, tmp_path):
    _, plan, cat = setup
    dst = tmp_path / "dst"
    bigger = copy.deepcopy(plan)
    bigger.files.append(dataclasses.replace(bigger.files[0], **{"name": "model-extra.safetensors",
                                                          "tensors": bigger.files[0].tensors[:1]}))  # fmt: skip
    bigger.files[0].tensors = bigger.files[0].tensors[1:]
    execute_plan(bigger, cat, dst, progress=False)
    assert (dst / "model-extra.safetensors").exists()
    execute_plan(plan, cat, dst, progress=False, overwrite=True)
    execute_plan(plan, cat, tmp_path / "fresh", progress=False)
    assert tree_bytes(dst) == tree_bytes(tmp_path / "fresh")


def test_overwrite_refuses_when_dst_holds_foreign_files(setup, tmp_path):
    _, plan, cat = setup
    dst = tmp_path / "dst"
    execute_plan(plan, cat, dst, progress=False)
    (dst / "my-notes.md").write_text("do not delete")
    before = tree_bytes(dst)
    with pytest.raises(OutputError, match=r"my-notes\.md: not written by ckpt"):
        execute_plan(plan, cat, dst, progress=False, overwrite=True)
    assert tree_bytes(dst) == before


def test_overwrite_refuses_a_folder_that_is_not_a_ckpt_output(setup, tmp_path):
    _, plan, cat = setup
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "model-00001-of-00003.safetensors").write_bytes(b"someone else's")
    with pytest.raises(OutputError, match="not a ckpt output"):
        execute_plan(plan, cat, dst, progress=False, overwrite=True)
    assert (dst / "model-00001-of-00003.safetensors").read_bytes() == b"someone else's"


def test_resume_and_overwrite_together_are_refused(setup, tmp_path):
    _, plan, cat = setup
    execute_plan(plan, cat, tmp_path / "dst", progress=False)
    with pytest.raises(OutputError, match="exclude each other"):
        execute_plan(plan, cat, tmp_path / "dst", progress=False, resume=True, overwrite=True)

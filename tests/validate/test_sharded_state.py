"""validate on vLLM sharded-state output: every rank repeats the parameter names."""

from __future__ import annotations

import shutil

from checkpoint_tool.cli.app import app
from checkpoint_tool.validate import validate_checkpoint


def _convert(src, dst):
    rc = app(
        ["convert", str(src), str(dst), "--tp", "2", "--layout", "vllm-sharded"],
        standalone_mode=False,
    )
    assert not rc


def test_per_rank_names_are_not_duplicates(synth_ckpt, tmp_path):
    dst = tmp_path / "dst"
    _convert(synth_ckpt("quark-mxfp4"), dst)
    report = validate_checkpoint(dst)
    dup = next(c for c in report.checks if c.id == "tensor_duplicate")
    assert dup.status == "passed", [f.message for f in dup.findings]


def test_a_name_twice_within_one_rank_is_a_duplicate(synth_ckpt, tmp_path):
    dst = tmp_path / "dst"
    _convert(synth_ckpt("quark-mxfp4"), dst)
    # a second part of rank 1 that repeats rank 1's tensors
    shutil.copy(dst / "model-rank-1-part-0.safetensors", dst / "model-rank-1-part-1.safetensors")
    report = validate_checkpoint(dst)
    dup = next(c for c in report.checks if c.id == "tensor_duplicate")
    assert dup.status == "failed"
    assert all("model-rank-1-part-" in f.message for f in dup.findings)
    assert report.exit_code == 1

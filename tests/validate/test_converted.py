"""`ckpt convert` output is what validate gates before publishing: it passes, and damage after
conversion (a flipped byte, an edited config) is caught by the manifest and value rules."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from checkpoint_tool.cli.app import main
from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

from .factory import poke_tensor, read_header_doc


def convert(src: Path, dst: Path, *args: str) -> None:
    argv, sys.argv = sys.argv, ["ckpt", "convert", str(src), str(dst), "--format", "json", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    assert exc.value.code in (0, None)


@pytest.fixture(scope="module")
def converted_hf(synth_ckpt, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("conv") / "hf"
    convert(synth_ckpt("quark-hybrid"), dst, "--tp", "2")
    return dst


@pytest.fixture(scope="module")
def converted_sharded(synth_ckpt, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("conv") / "sharded"
    convert(synth_ckpt("quark-nvfp4"), dst, "--layout", "vllm-sharded")
    return dst


def by_id(report) -> dict:
    return {c.id: c for c in report.checks}


def test_converted_hf_output_passes_with_its_manifest(converted_hf: Path) -> None:
    report = validate_checkpoint(converted_hf, ValidateOptions(scan_weights=True, strict=True))
    assert report.findings() == []
    checks = by_id(report)
    assert checks["checksums"].status.value == "passed"
    assert checks["experts_present"].status.value == "passed"


def test_byte_flipped_after_conversion(converted_hf: Path, tmp_path: Path) -> None:
    dst = tmp_path / "hf"
    shutil.copytree(converted_hf, dst)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    name = next(n for n in sorted(index["weight_map"]) if n.endswith("experts.0.up_proj.weight"))
    poke_tensor(dst, name, 0, b"\x5a")
    report = validate_checkpoint(dst)
    (f,) = report.findings()
    assert f.rule == "checksums" and f.file == index["weight_map"][name]
    assert report.exit_code == 1


def test_converted_sharded_state(converted_sharded: Path, tmp_path: Path) -> None:
    report = validate_checkpoint(converted_sharded, ValidateOptions(scan_weights=True))
    assert report.exit_code == 0, [f.line() for f in report.findings()]
    checks = by_id(report)
    assert "sharded-state" in checks["experts_present"].skipped_reason
    assert checks["scale_values"].status.value == "passed"
    # engine parameter names are still scale-checked: an NVFP4 group scale set to NaN (0x7F)
    dst = tmp_path / "sharded"
    shutil.copytree(converted_sharded, dst)
    shard = next(dst.glob("model-rank-0-part-*.safetensors"))
    n, doc = read_header_doc(shard)
    name = next(k for k in sorted(doc) if k.endswith("w13_weight_scale"))
    raw = bytearray(shard.read_bytes())
    raw[8 + n + doc[name]["data_offsets"][0]] = 0x7F
    shard.write_bytes(bytes(raw))
    report = validate_checkpoint(dst)
    hits = [f for f in report.findings() if f.rule == "scale_values"]
    assert [f.tensor for f in hits] == [name] and "1 NaN" in hits[0].message

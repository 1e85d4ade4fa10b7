"""Real producer layouts pass: every Quark 0.13 export copied in tests/fixtures (names, dtypes,
shapes, quantization_config exactly as written), with Quark's file-size total_size."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

from .factory import STEMS, build_checkpoint

#: Quark keeps fused 3-D experts in BF16 (vLLM wants per-expert tensors): a warning, not an error
FUSED_3D = {s for s in STEMS if "preprocessed" not in s}


@pytest.mark.parametrize("stem", sorted(STEMS))
def test_quark_export_passes(tmp_path: Path, stem: str) -> None:
    dst = build_checkpoint(tmp_path / "c", stem=stem, total_size="files")
    report = validate_checkpoint(dst, ValidateOptions(scan_weights=True))
    assert [f.line() for f in report.findings() if f.severity == "error"] == []
    warned = {f.rule for f in report.findings()}
    expected = {"total_size"} | ({"fused_experts_unquantized"} if stem in FUSED_3D else set())
    assert warned == expected
    assert report.exit_code == 0

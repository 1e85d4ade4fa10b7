"""Every synthetic preset (format-faithful: real names, dtypes, shapes, configs) validates clean.

A rule that fires here is a false positive on real producer layouts (or a synth/resolve bug);
``quark-hybrid`` writes Quark's file-size ``total_size``, which must only warn.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.synth import PRESETS
from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

#: preset -> the warnings its producer really causes
EXPECTED_WARNINGS = {"quark-hybrid": {"total_size"}}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_validates_clean(synth_ckpt, preset: str) -> None:
    report = validate_checkpoint(synth_ckpt(preset), ValidateOptions(scan_weights=True))
    errors = [f.line() for f in report.findings() if f.severity == "error"]
    warned = {f.rule for f in report.findings() if f.severity == "warning"}
    assert errors == []
    assert warned == EXPECTED_WARNINGS.get(preset, set())
    assert report.exit_code == 0

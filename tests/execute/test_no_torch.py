"""``ckpt convert`` moves bytes: it never imports torch (importing it alone costs ~2 s of a
process whose target is a ratio to ``cp -r``). Checked in a fresh interpreter."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("preset", "tp"), [("quark-hybrid", 1), ("deepseek-v3-fp8", 2)])
def test_convert_never_imports_torch(synth_ckpt, fresh_cli, tmp_path, preset, tp):
    dst = tmp_path / "out"
    code, torch_imported, err = fresh_cli(
        "convert", str(synth_ckpt(preset)), str(dst), "--tp", str(tp),
        "--no-progress", "--no-fsync", "--format", "json",
    )  # fmt: skip
    assert code in (0, None), err
    assert not torch_imported
    assert (dst / "ckpt-manifest.json").is_file()

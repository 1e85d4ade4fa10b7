"""``ckpt validate`` with only the checks that read headers and config.json (what a CI runner
gates on a 2 TB checkpoint without reading its bytes) never imports torch (~2 s and ~200 MB
of a process otherwise a few times the header-read time). Checked in a fresh interpreter."""

from __future__ import annotations

import pytest

HEADER_CHECKS = [
    "index_valid", "shard_missing", "header_valid", "offsets_in_range", "tensor_duplicate",
    "index_tensors", "config_json", "quant_config", "layers_present", "experts_present",
    "scales_present", "tensors_explained", "weight_dtype", "scale_dtype", "scale_shape",
    "expert_shapes", "engine_loads",
]  # fmt: skip


@pytest.mark.parametrize("preset", ["quark-hybrid", "deepseek-v3-fp8"])
def test_header_only_validate_never_imports_torch(synth_ckpt, fresh_cli, preset):
    only = [a for check in HEADER_CHECKS for a in ("--only", check)]
    code, torch_imported, err = fresh_cli(
        "validate", str(synth_ckpt(preset)), *only, "--format", "json"
    )
    assert code in (0, 1, None), err
    assert not torch_imported

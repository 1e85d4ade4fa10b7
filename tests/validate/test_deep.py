"""--deep: sampled layers through the runtime; degenerate decodes are caught, limits skip cleanly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checkpoint_tool.validate import ValidateOptions, validate_checkpoint
from checkpoint_tool.validate.deep import sample_layers

from .factory import build_checkpoint

DEEP = ValidateOptions(deep=True, deep_tokens=4)
EXPERT_PREFIX = "model.layers.1.mlp."


def deep_result(path: Path, options: ValidateOptions = DEEP):
    report = validate_checkpoint(path, options, only=["deep_runtime"])
    return next(c for c in report.checks if c.id == "deep_runtime")


def set_expert_scales(code: int):
    """Every routed/shared expert E8M0 scale byte set to ``code`` (2**(code-127))."""

    def mutate(table: dict, config: dict) -> None:
        for name, (dtype, shape, data) in list(table.items()):
            if name.startswith(EXPERT_PREFIX) and name.endswith(".weight_scale"):
                table[name] = (dtype, shape, bytes([code]) * len(data))

    return mutate


def zero_expert_weights(table: dict, config: dict) -> None:
    for name, (dtype, shape, data) in list(table.items()):
        if name.startswith(EXPERT_PREFIX) and name.endswith("_proj.weight"):
            table[name] = (dtype, shape, bytes(len(data)))  # FP4 code 0 = +0.0


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (([1, 2, 3, 4, 5], 3), [1, 3, 5]),
        (([1, 2, 3, 4, 5], 2), [1, 5]),
        (([3, 4], 5), [3, 4]),
        (([7], 1), [7]),
        (([], 2), []),
    ],
)
def test_sample_layers_spread(values, expected) -> None:
    assert sample_layers(*values) == expected


def test_not_requested_is_skipped(tmp_path: Path) -> None:
    result = deep_result(build_checkpoint(tmp_path / "c"), ValidateOptions())
    assert result.status.value == "skipped" and "--deep" in result.skipped_reason


def test_clean_checkpoint_runs(tmp_path: Path) -> None:
    result = deep_result(build_checkpoint(tmp_path / "c"))
    assert result.status.value == "passed", [f.line() for f in result.findings]


def test_nan_scale_gives_nan_outputs(tmp_path: Path) -> None:
    result = deep_result(build_checkpoint(tmp_path / "c", mutate=set_expert_scales(255)))
    (f,) = result.findings
    assert f.severity == "error" and "NaN/inf" in f.message and f.tensor == "model.layers.1.mlp"


def test_zero_weights_give_zero_output(tmp_path: Path) -> None:
    result = deep_result(build_checkpoint(tmp_path / "c", mutate=zero_expert_weights))
    (f,) = result.findings
    assert f.severity == "error" and "all zeros" in f.message


def test_scales_far_off_warn(tmp_path: Path) -> None:
    """Scales of 2^23 instead of ~2^-8: finite, but an output far larger than the input."""
    result = deep_result(build_checkpoint(tmp_path / "c", mutate=set_expert_scales(150)))
    (f,) = result.findings
    assert f.severity == "warning" and "RMS" in f.message


def test_runtime_missing_skips_cleanly(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "checkpoint_tool.runtime.moe", None)
    result = deep_result(build_checkpoint(tmp_path / "c"))
    assert result.status.value == "skipped" and "runtime is not available" in result.skipped_reason


def test_deepseek_v4_runs(synth_ckpt) -> None:
    """DeepSeek-V4: sqrtsoftplus routing, the hash-routed layer 0 (tid2eid), the swiglu clamp."""
    result = deep_result(synth_ckpt("deepseek-v4"), ValidateOptions(deep=True, deep_tokens=4))
    assert result.status.value == "passed", [f.line() for f in result.findings]


def test_model_the_runtime_cannot_route_skips(tmp_path: Path) -> None:
    """A routing function the runtime does not implement: a limit of ckpt, not a defect."""

    def odd_routing(table: dict, config: dict) -> None:
        config["scoring_func"] = "sqrtrelu"

    result = deep_result(build_checkpoint(tmp_path / "c", mutate=odd_routing))
    assert result.status.value == "skipped" and "cannot route" in result.skipped_reason

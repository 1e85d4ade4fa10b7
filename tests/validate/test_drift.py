"""--expect-policy: an earlier `ckpt inspect --format json` pins every per-layer decision."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from checkpoint_tool.cli.app import main
from checkpoint_tool.errors import UsageError
from checkpoint_tool.validate import ValidateOptions, validate_checkpoint

from .factory import build_checkpoint

SHARED = "model.layers.1.mlp.shared_experts"


def inspect_json(capsys, path: Path, *args: str) -> str:
    argv, sys.argv = sys.argv, ["ckpt", "inspect", str(path), "--format", "json", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    assert exc.value.code in (0, 1, None)  # 1: inspect found issues (still prints the report)
    return capsys.readouterr().out


def bf16_shared_experts(table: dict, config: dict) -> None:
    """Quark per-layer exclusion of the shared expert: BF16 weights, no scales, listed in exclude
    (FORMATS.md §5) - vLLM then refuses FSE for the layer."""
    rng = np.random.default_rng(1)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        module = f"{SHARED}.{proj}"
        _, (rows, packed), _ = table.pop(f"{module}.weight")
        del table[f"{module}.weight_scale"]
        x = rng.standard_normal(rows * packed * 2).astype(np.float32)
        data = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        table[f"{module}.weight"] = ("BF16", (rows, packed * 2), data)
        config["quantization_config"]["exclude"].append(module)


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A checkpoint and the policy `ckpt inspect --tp 2` gave for it."""
    base = tmp_path_factory.mktemp("drift")
    return build_checkpoint(base / "ckpt"), base / "policy.json"


def test_same_checkpoint_no_drift(capsys, pinned, tmp_path: Path) -> None:
    ckpt, _ = pinned
    policy = tmp_path / "policy.json"
    policy.write_text(inspect_json(capsys, ckpt, "--tp", "2"))
    report = validate_checkpoint(ckpt, ValidateOptions(expect_policy=policy))
    check = next(c for c in report.checks if c.id == "policy_drift")
    assert check.status.value == "passed" and report.exit_code == 0


def test_excluded_shared_expert_is_drift(capsys, pinned, tmp_path: Path) -> None:
    ckpt, _ = pinned
    policy = tmp_path / "policy.json"
    # pinned for an engine that fuses per layer (the stock default fuses none at all)
    policy.write_text(inspect_json(capsys, ckpt, "--tp", "2", "--target", "vllm-per-layer-fse"))
    changed = build_checkpoint(tmp_path / "changed", mutate=bf16_shared_experts)
    report = validate_checkpoint(changed, ValidateOptions(expect_policy=policy))
    hits = [f for f in report.findings() if f.rule == "policy_drift"]
    assert len(hits) == 1 and hits[0].tensor == "model.layers.1.mlp"
    msg = hits[0].message
    assert "fse.enabled: true -> false" in msg and "shared.scheme: mxfp4/32 -> unquantized" in msg
    assert report.exit_code == 1
    # the changed checkpoint is otherwise valid: drift is the only failure
    assert {f.rule for f in report.findings() if f.severity == "error"} == {"policy_drift"}


def test_options_come_from_the_expected_report(capsys, pinned, tmp_path: Path) -> None:
    """A policy pinned at --tp 4 is rebuilt at --tp 4 (192/4 = 48 is not a multiple of 32)."""
    ckpt, _ = pinned
    policy = tmp_path / "policy.json"
    doc = json.loads(inspect_json(capsys, ckpt, "--tp", "4"))
    assert doc["tp"] == 4 and doc["moe_layers"][0]["intermediate"]["aligned"] is False
    policy.write_text(json.dumps(doc))
    assert validate_checkpoint(ckpt, ValidateOptions(expect_policy=policy)).exit_code == 0
    doc["moe_layers"][0]["intermediate"]["padded_per_rank"] += 32
    doc["moe_layers"][0]["fse"]["reason"] = "wording is not a decision"
    policy.write_text(json.dumps(doc))
    (hit,) = [
        f
        for f in validate_checkpoint(ckpt, ValidateOptions(expect_policy=policy)).findings()
        if f.rule == "policy_drift"
    ]
    assert "intermediate.padded_per_rank: 96 -> 64" in hit.message
    assert "reason" not in hit.message


def test_layer_removed_is_drift(capsys, pinned, tmp_path: Path) -> None:
    ckpt, _ = pinned
    doc = json.loads(inspect_json(capsys, ckpt))
    extra = json.loads(json.dumps(doc["moe_layers"][0]))
    extra.update(layer=5, prefix="model.layers.5.mlp")
    doc["moe_layers"].append(extra)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(doc))
    (hit,) = [
        f
        for f in validate_checkpoint(ckpt, ValidateOptions(expect_policy=policy)).findings()
        if f.rule == "policy_drift"
    ]
    assert hit.tensor == "model.layers.5.mlp" and "no longer a MoE layer" in hit.message


def test_not_a_policy_is_a_usage_error(pinned, tmp_path: Path) -> None:
    ckpt, _ = pinned
    bad = tmp_path / "p.json"
    bad.write_text('{"moe_layers": 3}')
    with pytest.raises(UsageError):
        validate_checkpoint(ckpt, ValidateOptions(expect_policy=bad))

"""The error preview against an independent computation; validate's drift check on the output."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.reader import read_tensor
from checkpoint_tool.quant.codecs import MxFp4Codec
from checkpoint_tool.requant.error import measure_layers
from checkpoint_tool.verify.requant import codec_mxfp4
from tests.main_run import run_main
from tests.requant.conftest import FSE_TARGET


def test_weight_error_matches_an_independent_computation(hybrid: Path) -> None:
    cat = open_catalog(hybrid, headers_only=False)
    errs = measure_layers(cat, [1, 3])
    num = den = 0.0
    for p in ("gate", "up", "down"):
        w = read_tensor(cat, f"model.layers.1.mlp.shared_experts.{p}_proj.weight").double()  # BF16
        q, s = codec_mxfp4(w.float())
        back = MxFp4Codec().dequantize({"weight": q, "scale": s}).double()
        num += float((back - w).pow(2).sum())
        den += float(w.pow(2).sum())
    assert abs(errs[1].weight_rel_error - (num / den) ** 0.5) < 1e-9
    assert errs[1].source == "unquantized"
    # the MoE output moves, but less than the shared expert alone (routed experts dilute it)
    assert 0.0 < errs[1].moe_rel_error < errs[1].weight_rel_error * 2
    assert errs[3].weight_rel_error == 0.0 and errs[3].moe_rel_error == 0.0


def test_moe_error_is_seeded_and_reproducible(hybrid: Path) -> None:
    cat = open_catalog(hybrid, headers_only=False)
    a, b = measure_layers(cat, [2]), measure_layers(cat, [2])
    assert a[2] == b[2]
    assert measure_layers(cat, [2], seed=1)[2].moe_rel_error != a[2].moe_rel_error


def test_drift_check_explains_requantized_layers(
    monkeypatch, capsys, hybrid: Path, converted: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_main(
        monkeypatch, capsys, "inspect", str(hybrid), "--target", FSE_TARGET, "--format", "json"
    )
    assert code in (0, 1)  # 1: the source's own findings (an inspect verdict)
    policy = tmp_path / "policy.json"
    policy.write_text(out)
    code, out, _ = run_main(
        monkeypatch, capsys, "validate", str(converted), "--expect-policy", str(policy),
        "--format", "json",
    )  # fmt: skip
    issues = [
        i for c in json.loads(out)["checks"] if c["id"] == "policy_drift" for i in c["findings"]
    ]
    by_layer = {i["tensor"]: i for i in issues}
    for n in (1, 2, 3, 4):
        i = by_layer[f"model.layers.{n}.mlp"]
        assert i["severity"] == "warning" and i["rule"] == "policy_drift_requantized"
        assert "requantized to MXFP4" in i["message"]


def test_drift_check_still_fails_unexplained_changes(
    monkeypatch, capsys, hybrid: Path, converted: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A requantized layer whose routed experts changed too: requantization does not explain it."""
    _, out, _ = run_main(
        monkeypatch, capsys, "inspect", str(hybrid), "--target", FSE_TARGET, "--format", "json"
    )
    policy = json.loads(out)
    policy["moe_layers"][0]["routed"]["format"] = "nvfp4"
    config = json.loads((converted / "config.json").read_text())
    assert config["ckpt"]["requantized_shared"]["layers"] == [1, 2]
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    _code, out, _ = run_main(
        monkeypatch, capsys, "validate", str(converted), "--expect-policy", str(path),
        "--format", "json",
    )  # fmt: skip
    issues = [
        i for c in json.loads(out)["checks"] if c["id"] == "policy_drift" for i in c["findings"]
    ]
    errors = [i for i in issues if i["severity"] == "error"]
    assert [i["tensor"] for i in errors] == ["model.layers.1.mlp"], issues
    assert "routed.format: nvfp4 -> mxfp4" in errors[0]["message"]

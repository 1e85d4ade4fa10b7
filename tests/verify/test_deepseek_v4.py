"""DeepSeek-V4 checkpoints verified numerically: the ``deepseek-v4`` synth preset converted with
the deepseek-v4-amd recipe at TP 1 / 2 / 4, its routed, hash-routed and MTP layers run, the
engram table checked; planted defects per DSV4 tensor kind caught; a check that could not run
fails unless allowed.

Layer 0 is hash-routed (``ffn.gate.tid2eid``), layers 1-3 route by sqrtsoftplus + bias, layer 4
is ``mtp.0`` (kept under the drafter's names), layer 1 has the engram table. With 32 tokens
and top-2 of 8 experts every expert of layer 1 is chosen (asserted), so a corrupted expert is
always exercised.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

from . import corrupt

NUMERIC = VerifyOptions(lossless=False, backend="torch", device="cpu", tokens=32)
V4_L1 = "model.layers.1.ffn.experts"


def _verify(dst: Path, src: Path, **kw: object):
    return verify_checkpoint(dst, str(src), NUMERIC.model_copy(update=kw))


def _layers(report) -> dict[int, object]:
    return {r.layer: r for r in report.numeric.layers}


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_clean_deepseek_v4_passes_every_layer_kind(converted, tp: int) -> None:
    src, dst = converted("deepseek-v4", tp=tp)
    report = _verify(dst, src, lossless=True)
    assert report.passed, report.numeric.reason
    assert report.lossless.status == "passed" and report.numeric.tp == tp
    layers = _layers(report)
    assert sorted(layers) == [0, 1, 4]  # hash-routed, sqrtsoftplus + bias, MTP
    assert "hash-routed" in layers[0].policy and layers[4].is_mtp
    assert report.numeric.ran_layers == [0, 1, 4] and report.numeric.skipped_layers == []
    for r in layers.values():
        assert r.status == "passed", r.message
        assert r.routing_mismatches == 0 and r.reference_norm > 1.0
        assert r.rel_error < 1e-5  # same bytes: float32 accumulation order only
    assert layers[1].experts_used == 8
    (engram,) = report.numeric.engram
    assert engram.status == "passed" and engram.rows_checked > 8


def test_triton_kernels_in_the_interpreter(converted) -> None:
    src, dst = converted("deepseek-v4", tp=2)
    report = _verify(dst, src, backend="triton", layers=[0, 4], tokens=8)
    assert report.passed, [r.message for r in report.numeric.layers]
    assert all(r.rel_error < 1e-5 for r in report.numeric.layers)


def test_swapped_w1_w3_is_caught(converted, dst_copy) -> None:
    src, dst = converted("deepseek-v4", tp=2)
    bad = dst_copy(dst)
    for suffix in ("weight", "weight_scale"):
        corrupt.swap(bad, f"{V4_L1}.3.w1.{suffix}", f"{V4_L1}.3.w3.{suffix}")
    numeric = _verify(bad, src)
    assert not numeric.passed
    layers = _layers(numeric)
    assert layers[1].status == "failed" and layers[1].rel_error > 1e-2
    assert layers[0].status == layers[4].status == "passed"  # other layers untouched
    lossless = verify_checkpoint(bad, str(src), VerifyOptions(numeric=False))
    assert {m.tensor for m in lossless.lossless.mismatches} >= {f"{V4_L1}.3.w1.weight"}


def test_swapped_w1_w3_in_a_hash_layer_and_the_mtp_layer(converted, dst_copy) -> None:
    src, dst = converted("deepseek-v4", tp=1)
    bad = dst_copy(dst)
    for prefix, scale in (
        ("model.layers.0.ffn.experts", "weight_scale"),
        ("mtp.0.ffn.experts", "scale"),
    ):
        for suffix in ("weight", scale):
            corrupt.swap(bad, f"{prefix}.5.w1.{suffix}", f"{prefix}.5.w3.{suffix}")
    layers = _layers(_verify(bad, src))
    assert layers[0].status == layers[4].status == "failed"
    assert layers[1].status == "passed"


def test_corrupted_hash_table_is_caught(converted, dst_copy) -> None:
    """tid2eid rows sent to other experts: the converted layer routes differently."""
    src, dst = converted("deepseek-v4", tp=1)
    bad = dst_copy(dst)
    table = corrupt.read(bad, "model.layers.0.ffn.gate.tid2eid")  # I64 [vocab, 2]
    rotated = bytearray(table)
    for i in range(0, len(rotated), 8):
        rotated[i] = (rotated[i] + 1) % 8
    corrupt.write(bad, "model.layers.0.ffn.gate.tid2eid", bytes(rotated))
    (layer0,) = _verify(bad, src, layers=[0]).numeric.layers
    assert layer0.status == "failed" and layer0.routing_mismatches > 16


def test_engram_scale_misrouted_by_rename_rules(synth_ckpt, tmp_path: Path) -> None:
    """A recipe without the engram-scale rule sends the table's scale through the generic
    ``.scale`` rule: lossless passes (it checks the plan it was given), numeric fails."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.execute import execute_plan, writer
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.recipes.loader import load_recipe

    root = Path(__file__).resolve().parents[2]
    text = (root / "recipes" / "deepseek-v4-amd.yaml").read_text()
    start = text.index("    - name: engram-scale")
    text = text[:start] + text[text.index("    # [v4]/[v41] every other") :]
    recipe_path = tmp_path / "deepseek-v4-amd-no-engram.yaml"
    recipe_path.write_text(text.replace("name: deepseek-v4-amd", "name: v4-no-engram", 1))
    src = synth_ckpt("deepseek-v4")
    catalog = open_catalog(src, headers_only=False)
    plan = plan_for_catalog(catalog, PlanOptions(tp=1), recipe=load_recipe(recipe_path))
    durable, writer.DURABLE = writer.DURABLE, False
    try:
        execute_plan(plan, catalog, tmp_path / "out", progress=False)
    finally:
        writer.DURABLE = durable
    report = verify_checkpoint(tmp_path / "out", str(src), VerifyOptions(backend="torch"))
    assert report.lossless.status == "passed"
    assert not report.passed and report.numeric.status == "failed"
    (engram,) = report.numeric.engram
    assert engram.status == "failed"
    assert "model.layers.1.engram.embed_tokens.weight_scale_inv missing" in engram.message
    assert all(r.status == "passed" for r in report.numeric.layers)


def test_engram_table_bytes_changed(converted, dst_copy) -> None:
    src, dst = converted("deepseek-v4", tp=1)
    bad = dst_copy(dst)
    name = "model.layers.1.engram.embed_tokens.weight_scale_inv"
    corrupt.write(bad, name, bytes([0x90]) * len(corrupt.read(bad, name)))
    (engram,) = _verify(bad, src).numeric.engram
    assert engram.status == "failed" and "decode to other values" in engram.message


def _set_config(folder: Path, **fields: object) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(fields)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_a_layer_that_cannot_run_fails_unless_allowed(converted, tmp_path: Path) -> None:
    src, dst = converted("deepseek-v4", tp=1)
    odd_src = tmp_path / "src"
    shutil.copytree(src, odd_src)
    _set_config(odd_src, scoring_func="sqrtrelu")  # a routing the runtime does not know
    report = _verify(dst, odd_src, layers=[1, 4])
    assert not report.passed and report.exit_code == 1
    assert report.numeric.status == "failed"
    assert report.numeric.skipped_layers == [1, 4] and report.numeric.ran_layers == []
    assert "--allow-skipped" in report.numeric.reason
    assert all("scoring_func 'sqrtrelu'" in r.message for r in report.numeric.layers)
    allowed = _verify(dst, odd_src, layers=[1, 4], allow_skipped=True)
    assert allowed.passed and allowed.numeric.skipped_layers == [1, 4]
    assert "skipped (--allow-skipped)" in allowed.numeric.reason  # the engram table still ran
    off = _verify(dst, src, lossless=True, numeric=False)
    assert off.passed and off.numeric.reason == "--no-numeric"


def _bump_f32_scalar(folder: Path, name: str, factor: float) -> None:
    (value,) = struct.unpack("<f", corrupt.read(folder, name))
    corrupt.write(folder, name, struct.pack("<f", value * factor))


NV_L1 = "model.layers.1.mlp.experts"


def test_wrong_nvfp4_global_scale_is_caught(converted, dst_copy) -> None:
    src, dst = converted("quark-nvfp4", tp=1)
    bad = dst_copy(dst)
    _bump_f32_scalar(bad, f"{NV_L1}.2.gate_proj.weight_scale_2", 2.0)
    (layer,) = _verify(bad, src).numeric.layers
    assert layer.status == "failed" and layer.rel_error > 1e-3


def test_w3_global_scale_unlike_w1_fails_as_vllm_runs_it(converted, tmp_path: Path) -> None:
    """vLLM fuses w1/w3 into w13 with w1's global scale: a w3 scale of its own (the same bytes
    in source and DST, so lossless passes) computes other numbers than the producer meant."""
    src, dst = converted("quark-nvfp4", tp=1)
    odd_src, odd_dst = tmp_path / "src", tmp_path / "dst"
    shutil.copytree(src, odd_src)
    shutil.copytree(dst, odd_dst)
    for folder in (odd_src, odd_dst):
        _bump_f32_scalar(folder, f"{NV_L1}.2.up_proj.weight_scale_2", 1.5)
    report = verify_checkpoint(odd_dst, str(odd_src), VerifyOptions(backend="torch", tokens=32))
    assert report.lossless.status == "passed"
    (layer,) = report.numeric.layers
    assert layer.status == "failed" and layer.rel_error > 1e-3

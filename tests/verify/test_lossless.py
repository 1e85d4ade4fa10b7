"""Lossless check on real conversions of synth presets, and each corruption it must catch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.errors import UsageError
from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

from . import corrupt

LOSSLESS = VerifyOptions(numeric=False)
L1 = "model.layers.1.mlp.experts"


def _lossless(dst: Path, src: Path, **kw: object):
    report = verify_checkpoint(dst, str(src), LOSSLESS.model_copy(update=kw))
    assert report.numeric.status == "skipped"
    return report


@pytest.mark.parametrize(
    ("preset", "tp"),
    [("quark-mxfp4", 1), ("quark-hybrid", 2), ("deepseek-v3-fp8", 2), ("quark-nvfp4", 1),
     ("quark-nvfp4", 2)],
)  # fmt: skip
def test_clean_conversions_pass(converted, preset: str, tp: int) -> None:
    src, dst = converted(preset, tp=tp)
    report = _lossless(dst, src)
    lossless = report.lossless
    assert report.passed and lossless.status == "passed", lossless.mismatches
    assert lossless.plan_matches_manifest is True
    index = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"]
    assert lossless.tensors_checked == len(index)
    assert lossless.bytes_compared == sum(
        f.stat().st_size for f in dst.glob("*.safetensors")
    ) - sum(8 + int.from_bytes(f.read_bytes()[:8], "little") for f in dst.glob("*.safetensors"))


def test_padding_is_counted_and_checked(converted) -> None:
    """deepseek-v3-fp8 at TP 2 pads I 128 -> 256 (block 128 per rank)."""
    src, dst = converted("deepseek-v3-fp8", tp=2)
    assert _lossless(dst, src).lossless.tensors_padded > 0


def _one(report, kind: str = "bytes_differ"):
    assert report.lossless.status == "failed" and not report.passed
    (m,) = report.lossless.mismatches
    assert m.kind == kind
    return m


def test_flipped_bytes_in_one_expert(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    name = f"{L1}.3.up_proj.weight"  # U8 [128, 128]: 128 bytes per row
    corrupt.flip_bytes(bad, name, offset=5 * 128 + 7, count=4)
    m = _one(_lossless(bad, src))
    assert m.tensor == name and m.elements_differ == 4
    assert m.first_index == [5, 7]
    assert m.origin.startswith(f"source {name} ")
    assert int(m.expected_hex, 16) ^ int(m.actual_hex, 16) == 0xFF


def test_swapped_experts(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.swap(bad, f"{L1}.1.down_proj.weight", f"{L1}.2.down_proj.weight")
    report = _lossless(bad, src)
    assert {m.tensor for m in report.lossless.mismatches} == {
        f"{L1}.1.down_proj.weight",
        f"{L1}.2.down_proj.weight",
    }
    assert all(m.elements_differ > 1000 for m in report.lossless.mismatches)


def test_zeroed_shared_expert_slot(converted, dst_copy) -> None:
    """The FSE slot experts.8 holds the shared expert; zeroing it is a lost shared expert."""
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.zero(bad, f"{L1}.8.gate_proj.weight")
    m = _one(_lossless(bad, src))
    assert m.tensor == f"{L1}.8.gate_proj.weight"
    assert "model.layers.1.mlp.shared_experts.gate_proj.weight" in m.origin


def test_removed_shared_expert_slot(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    gone = [f"{L1}.8.down_proj.weight", f"{L1}.8.down_proj.weight_scale"]
    corrupt.remove(bad, gone)
    report = _lossless(bad, src)
    kinds = {(m.tensor, m.kind) for m in report.lossless.mismatches if m.tensor}
    assert kinds == {(n, "missing") for n in gone}
    # the index no longer matches the plan either
    assert any(m.kind == "file_differs" for m in report.lossless.mismatches)


def test_wrong_scale_byte(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    name = f"{L1}.2.down_proj.weight_scale"  # E8M0 U8 [256, 4]
    corrupt.add_to_byte(bad, name, offset=9, delta=2)
    m = _one(_lossless(bad, src))
    assert m.tensor == name and m.first_index == [2, 1] and m.elements_differ == 1


def test_corrupt_padding_names_the_padding(converted, dst_copy) -> None:
    """A non-zero byte in a zero-padded region: invisible to the numbers, caught here."""
    src, dst = converted("deepseek-v3-fp8", tp=2)
    bad = dst_copy(dst)
    name = f"{L1}.0.gate_proj.weight"  # F8_E4M3 [256, 256], rows 128.. are padding
    corrupt.write(bad, name, b"\x38", offset=200 * 256 + 3)
    m = _one(_lossless(bad, src))
    assert m.first_index == [200, 3] and m.expected_hex == "00" and m.actual_hex == "38"
    assert m.origin.startswith("padding of ")
    scale = f"{L1}.0.down_proj.weight_scale_inv"  # F32 [2, 2]: column 1 is neutral padding
    corrupt.write(bad, scale, b"\x00\x00\x00\x40", offset=4)  # 2.0 instead of 1.0
    report = _lossless(bad, src)
    pad = [m for m in report.lossless.mismatches if m.tensor == scale]
    assert pad and pad[0].expected_hex == "0000803f" and pad[0].origin.startswith("padding of ")


def test_small_budget_finds_the_same(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    name = f"{L1}.3.up_proj.weight"
    corrupt.flip_bytes(bad, name, offset=100 * 128 + 1, count=1)
    m = _one(_lossless(bad, src, memory_budget=300))
    assert m.first_index == [100, 1]


def test_config_edit_is_reported(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    config = json.loads((bad / "config.json").read_text())
    config["moe_intermediate_size"] = 64
    (bad / "config.json").write_text(json.dumps(config))
    m = _one(_lossless(bad, src), kind="file_differs")
    assert m.file == "config.json" and "moe_intermediate_size" in m.message


def test_another_source_is_a_usage_error(converted, synth_ckpt) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    with pytest.raises(UsageError, match="converted from"):
        _lossless(dst, synth_ckpt("quark-nvfp4"))


def test_same_layout_other_values_fails_with_a_hint(converted, synth_ckpt) -> None:
    """Shard headers match (same preset, other seed): every weight differs, and the note says
    why that is probably the wrong --source."""
    _, dst = converted("quark-mxfp4", tp=1)
    report = _lossless(dst, synth_ckpt("quark-mxfp4", seed=1))
    assert report.lossless.status == "failed"
    assert report.lossless.mismatch_count > report.lossless.tensors_checked // 2
    assert any("is --source the checkpoint" in n for n in report.notes)


def test_no_manifest_is_a_usage_error(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    (bad / "ckpt-manifest.json").unlink()
    with pytest.raises(UsageError, match="--no-lossless"):
        _lossless(bad, src)


def test_mismatch_list_is_capped_but_counted(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    for e in range(4):
        corrupt.flip_bytes(bad, f"{L1}.{e}.gate_proj.weight", 0, 1)
    report = _lossless(bad, src, max_mismatches=2)
    assert len(report.lossless.mismatches) == 2
    assert report.lossless.mismatches_not_listed == 2


def test_truncated_and_missing_output_files(converted, dst_copy) -> None:
    """Unreadable output is a finding per tensor (exit 1), not a crash (exit 2)."""
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    (shard,) = bad.glob("*.safetensors")
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    report = _lossless(bad, src)
    kinds = {m.kind for m in report.lossless.mismatches}
    assert kinds == {"unreadable"} and report.lossless.mismatch_count == 213
    shard.unlink()
    report = _lossless(bad, src)
    assert {m.kind for m in report.lossless.mismatches} == {"missing"}

"""Value rules: scale sanity and --scan-weights, streamed in chunks, against numpy references."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from checkpoint_tool.validate import ValidateOptions, validate_checkpoint
from checkpoint_tool.validate.context import load_context
from checkpoint_tool.validate.scales import scan_fp8_nan_codes, scan_values

from .factory import build_checkpoint, poke_tensor, shard_holding

ATTN_W = "model.layers.1.self_attn.q_b_proj.weight"  # F8_E4M3 [192, 64]
ATTN_SCALE = "model.layers.1.self_attn.q_b_proj.weight_scale"  # BF16 [192]
NORM = "model.layers.0.input_layernorm.weight"  # BF16 [256]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("pristine") / "ckpt")


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(pristine, dst)
    return dst


def bf16(x: float) -> bytes:
    return np.array([x], dtype=ml_dtypes.bfloat16).tobytes()


def only(report, rule: str) -> list:
    return [f for f in report.findings() if f.rule == rule]


def test_zero_scale_warns_negative_scale_fails(ckpt: Path) -> None:
    poke_tensor(ckpt, ATTN_SCALE, 2 * 3, bf16(0.0))
    report = validate_checkpoint(ckpt)
    (f,) = only(report, "scale_values")
    assert f.severity == "warning" and "[3]" in f.message and report.exit_code == 0
    poke_tensor(ckpt, ATTN_SCALE, 2 * 9, bf16(-0.5))
    report = validate_checkpoint(ckpt)
    errors = [f for f in only(report, "scale_values") if f.severity == "error"]
    assert len(errors) == 1 and "1 negative" in errors[0].message and "[9]" in errors[0].message
    assert report.exit_code == 1


def test_nan_scale_counts(ckpt: Path) -> None:
    for i in (1, 4, 100):
        poke_tensor(ckpt, ATTN_SCALE, 2 * i, bf16(float("nan")))
    (f,) = only(validate_checkpoint(ckpt), "scale_values")
    assert "3 NaN of 192 BF16" in f.message and "first at [1]" in f.message


def test_weights_not_scanned_by_default(ckpt: Path) -> None:
    poke_tensor(ckpt, ATTN_W, 0, b"\x7f")
    report = validate_checkpoint(ckpt)
    check = next(c for c in report.checks if c.id == "weight_values")
    assert check.status.value == "skipped" and "--scan-weights" in check.skipped_reason
    assert report.exit_code == 0


def poke_fp8_nans(ckpt: Path) -> int:
    """Poke NaN codes at known places; return the count a numpy/ml_dtypes scan of the file sees."""
    for off, code in ((5, b"\x7f"), (64 * 3 + 1, b"\xff"), (64 * 191 + 63, b"\x7f")):
        poke_tensor(ckpt, ATTN_W, off, code)
    path = shard_holding(ckpt, ATTN_W)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    begin, end = json.loads(raw[8 : 8 + n])[ATTN_W]["data_offsets"]
    data = np.frombuffer(raw[8 + n + begin : 8 + n + end], dtype=np.uint8)
    return int(np.isnan(data.view(ml_dtypes.float8_e4m3fn).astype(np.float32)).sum())


def test_fp8_nan_codes_reported(ckpt: Path) -> None:
    expected = poke_fp8_nans(ckpt)
    assert expected == 3
    report = validate_checkpoint(ckpt, ValidateOptions(scan_weights=True))
    (f,) = only(report, "weight_values")
    assert f.tensor == ATTN_W and f.message.startswith(f"{expected} of {192 * 64} F8_E4M3")
    assert "first at [0, 5]" in f.message


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_fp8_nan_scan_is_chunk_independent(ckpt: Path, chunk: int) -> None:
    """Streaming in chunks of any size (aligned or not) counts the same as one read."""
    expected = poke_fp8_nans(ckpt)
    ctx = load_context(ckpt, ValidateOptions(chunk_bytes=chunk))
    stats = scan_fp8_nan_codes(ctx, ctx.catalog.tensors[ATTN_W])
    assert (stats.nan, stats.total, stats.first_bad) == (expected, 192 * 64, 5)


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_bf16_value_scan_is_chunk_independent(ckpt: Path, chunk: int) -> None:
    poke_tensor(ckpt, NORM, 2 * 17, bf16(float("inf")))
    poke_tensor(ckpt, NORM, 2 * 200, bf16(float("nan")))
    poke_tensor(ckpt, NORM, 2 * 30, bf16(0.0))
    ctx = load_context(ckpt, ValidateOptions(chunk_bytes=chunk))
    entry = ctx.catalog.tensors[NORM]
    stats = scan_values(ctx, entry, e8m0=False)
    raw = shard_holding(ckpt, NORM).read_bytes()[entry.begin : entry.end]
    ref = np.frombuffer(raw, dtype=ml_dtypes.bfloat16).astype(np.float64)
    assert stats.nan == np.isnan(ref).sum() == 1
    assert stats.inf == np.isinf(ref).sum() == 1
    assert stats.zero == (ref == 0).sum()
    assert stats.negative == ((ref < 0) & ~np.isinf(ref)).sum()
    assert stats.first_bad == 17 and stats.first_zero == int(np.flatnonzero(ref == 0)[0])
    weights = scan_values(ctx, entry, e8m0=False, positive=False)
    assert (weights.nan, weights.inf, weights.first_bad) == (1, 1, 17)


def test_bf16_weight_nan_inf_reported(ckpt: Path) -> None:
    poke_tensor(ckpt, NORM, 2 * 17, bf16(float("inf")))
    poke_tensor(ckpt, NORM, 2 * 200, bf16(float("nan")))
    report = validate_checkpoint(ckpt, ValidateOptions(scan_weights=True))
    (f,) = only(report, "weight_values")
    assert f.tensor == NORM and "1 NaN and 1 inf of 256 BF16" in f.message
    assert "first at [17]" in f.message


def test_unreadable_tensors_are_not_read(ckpt: Path) -> None:
    """A truncated shard: value rules skip tensors past the end instead of crashing."""
    p = shard_holding(ckpt, ATTN_W)
    p.write_bytes(p.read_bytes()[:-5000])
    report = validate_checkpoint(ckpt, ValidateOptions(scan_weights=True))
    assert {f.rule for f in report.findings()} == {"shard_truncated"}

"""``vllm-sharded`` outputs: the lossless check reads rank files; the numeric check runs each
rank's stored slices (stacked ``w13``/``w2``, fused slots, merged shared ``gate_up``) and sums
them, without re-slicing anything."""

from __future__ import annotations

import pytest

from checkpoint_tool.errors import UsageError
from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

from . import corrupt

OPTS = VerifyOptions(backend="torch", device="cpu", tokens=32, layers=[1])
W13 = "model.layers.1.mlp.experts.routed_experts.w13_weight"  # [9, 2 I_r, H/2] U8 per rank
W2 = "model.layers.1.mlp.experts.routed_experts.w2_weight"  # [9, H, I_r/2]


@pytest.mark.parametrize("fse", ["auto", "off"])
def test_sharded_outputs_pass(converted, fse: str) -> None:
    src, dst = converted("quark-mxfp4", tp=2, fse=fse, layout="vllm-sharded")
    report = verify_checkpoint(dst, str(src), OPTS)
    assert report.passed, (report.lossless.mismatches, report.numeric.layers)
    assert report.numeric.layout == "vllm-sharded" and report.numeric.tp == 2
    (layer,) = report.numeric.layers
    assert layer.fused is (fse == "auto")
    assert layer.status == "passed" and layer.rel_error < layer.rel_tolerance
    assert report.lossless.files_checked == 2


def test_corrupt_expert_on_one_rank(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=2, layout="vllm-sharded")
    bad = dst_copy(dst)
    part = bad / "model-rank-1-part-0.safetensors"
    _, begin, end = corrupt.locate(part, W2)
    per_expert = (end - begin) // 9
    corrupt.flip_bytes(part, W2, offset=3 * per_expert + 100, count=64)  # expert 3's down
    report = verify_checkpoint(bad, str(src), OPTS)
    (m,) = report.lossless.mismatches
    assert m.tensor == W2 and m.file == "model-rank-1-part-0.safetensors"
    assert m.first_index[0] == 3  # expert 3 of the stacked parameter
    assert report.numeric.layers[0].status == "failed"


def test_zeroed_fused_slot_on_rank_0_fails_numerically(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=2, layout="vllm-sharded")
    bad = dst_copy(dst)
    part = bad / "model-rank-0-part-0.safetensors"
    _, begin, end = corrupt.locate(part, W13)
    per_expert = (end - begin) // 9
    corrupt.write(part, W13, bytes(per_expert), offset=8 * per_expert)  # slot 8 = shared
    report = verify_checkpoint(bad, str(src), OPTS.model_copy(update={"lossless": False}))
    (layer,) = report.numeric.layers
    assert layer.status == "failed" and layer.rel_error > 0.01


def test_tp_must_match_the_ranks(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=2, layout="vllm-sharded")
    with pytest.raises(UsageError, match="vllm-sharded output for 2 rank"):
        verify_checkpoint(dst, str(src), OPTS.model_copy(update={"tp": 4, "lossless": False}))

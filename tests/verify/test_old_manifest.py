"""An output an earlier ckpt wrote still verifies: its manifest holds the plan hash of the
encoding before ckpt's own (``plan.legacy_hash``), as that ckpt recorded it."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

#: ``plan_sha256`` in the manifest of ``ckpt convert quark-mxfp4 --tp 1 --target
#: vllm-per-layer-fse`` (the ``converted`` fixture's plan), as the earlier ckpt wrote it
RECORDED = "a1ca98d050ebaa480222e68edfae68af0d79a50c250be99c1b9a5929cbc64678"


def _with_plan_sha(dst: Path, sha: str) -> None:
    path = dst / "ckpt-manifest.json"
    manifest = json.loads(path.read_text())
    manifest["plan_sha256"] = sha
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def test_a_manifest_of_an_earlier_ckpt_still_verifies(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    old = dst_copy(dst)
    now = json.loads((dst / "ckpt-manifest.json").read_text())["plan_sha256"]
    assert now != RECORDED  # the encoding changed; the earlier hash still names the plan
    _with_plan_sha(old, RECORDED)
    report = verify_checkpoint(old, str(src), VerifyOptions(numeric=False))
    assert report.passed and report.lossless.plan_matches_manifest is True


def test_another_plans_hash_does_not_match(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    _with_plan_sha(bad, RECORDED.replace("e", "f"))
    report = verify_checkpoint(bad, str(src), VerifyOptions(numeric=False))
    assert report.lossless.plan_matches_manifest is False

"""``plan.legacy_hash`` gives the plan hash an earlier ckpt recorded for the same plan: the
golden plans' hashes as that ckpt wrote them (``data/legacy_plan_sha256.json``), and a
requantized plan's (its pieces then named their source ``<name>@mxfp4``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from checkpoint_tool.plan.legacy_hash import legacy_plan_sha256
from checkpoint_tool.plan.serialize import plan_load, plan_sha256

sys.path.insert(0, str(Path(__file__).parents[1] / "golden"))
from golden_cases import read_golden

RECORDED = json.loads((Path(__file__).with_name("data") / "legacy_plan_sha256.json").read_text())
#: ``plan_sha256`` of ``ckpt convert quark-hybrid --target vllm-0.33-rocm-aiter-fse
#: --requantize-shared mxfp4`` (every candidate layer), as the earlier ckpt recorded it
REQUANT_RECORDED = "c983ea2b99f68d54fab3b3f58606126b3027d6111ebaa4f326c68d9d4c3c23af"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_golden_plans_hash_as_recorded(name: str) -> None:
    plan = plan_load(json.loads(read_golden(name)))
    assert legacy_plan_sha256(plan) == RECORDED[name]
    assert plan_sha256(plan) != RECORDED[name]


def test_a_requantized_plan_hashes_as_recorded(synth_ckpt) -> None:
    from checkpoint_tool.cli.session import open_plan
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.requant.select import RequantRequest

    _, plan = open_plan(
        str(synth_ckpt("quark-hybrid")),
        PlanOptions(target="vllm-0.33-rocm-aiter-fse"),
        recipe=None,
        headers_only=False,
        requant=RequantRequest.parse("mxfp4", None, None),
    )
    assert legacy_plan_sha256(plan) == REQUANT_RECORDED

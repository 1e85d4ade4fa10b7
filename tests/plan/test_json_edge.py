"""The compact plan at its JSON edge: ``plan.json_edge`` writes what the pydantic document
models (``plan.document``) and ``json`` write for the same plan, byte for byte, and reads it
back to an equal plan. The fast writers are templates; the reference is pydantic + json."""

from __future__ import annotations

import json

import pytest
from plan_helpers import plan_of

from checkpoint_tool.plan.document import OutputFileDocument, PlanDocument
from checkpoint_tool.plan.json_edge import file_dump, file_json, plan_dump, plan_pretty_json
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan, PlanOptions
from checkpoint_tool.regions import Pad, Piece, Region

CASES = [
    ("quark-hybrid", {"tp": 2}),
    ("quark-mxfp4", {"tp": 3}),  # every expert padded: slices and pads in the pieces
    ("quark-hybrid", {"tp": 2, "layout": "vllm-sharded"}),  # stacked, concatenated, filled
    ("deepseek-v3-fp8", {"tp": 2, "fse": "on", "target": "vllm-0.33-rocm-aiter-fse"}),
    ("qwen3.5-moe-mxfp4", {"tp": 2, "layers": [0]}),  # dropped tensors
]


def reference_pretty(plan: Plan) -> str:
    doc = PlanDocument.model_validate(plan_dump(plan))
    return json.dumps(doc.model_dump(mode="json"), indent=2, sort_keys=True)


@pytest.mark.parametrize(("preset", "options"), CASES)
def test_writers_equal_pydantic_and_json(synth_ckpt, preset, options):
    _, plan = plan_of(synth_ckpt(preset), **options)
    assert plan_pretty_json(plan) == reference_pretty(plan)
    for f in plan.files:
        assert file_json(f) == OutputFileDocument.model_validate(file_dump(f)).model_dump_json()
    whole = PlanDocument.model_validate(plan_dump(plan)).model_dump_json()
    assert plan.model_dump_json() == whole
    assert Plan.model_validate_json(whole) == plan


def test_odd_values_are_escaped_like_json():
    """Names with quotes, backslashes, control and non-ASCII characters; constant fills."""
    names = ['a"b', "c\\d", "e\nf\tg", "h\u00e9i\u2603", "j\x01k"]
    tensors = [
        OutputTensor(n, "BF16", [2, 3], [Piece(n, [Region(0, 0, 1)], [Pad(0, 1, "803f")])])
        for n in names
    ]
    tensors.append(OutputTensor("buf", "F32", [], [], fill="0000803f", layer=7))
    f = OutputFile("model-rank-0-part-0.safetensors", tensors, nbytes=12, rank=0)
    plan = Plan(
        ckpt_version="0",
        source="sha256:0",
        recipe="r",
        options=PlanOptions(tp=2),
        files=[f],
        fse_layers={10: True, 2: False},
        provenance={n: [n] for n in names},
    )
    assert plan_pretty_json(plan) == reference_pretty(plan)
    assert file_json(f) == OutputFileDocument.model_validate(file_dump(f)).model_dump_json()
    assert Plan.model_validate(json.loads(plan_pretty_json(plan))) == plan

"""A plan's JSON: ``plan.serialize`` writes what ``json.dumps(plan_dump(plan), sort_keys=True)``
writes for the same plan, byte for byte, pretty and canonical, and reads it back (through the
pydantic document models generated from the plan records) to an equal plan. The fast writers
are templates; the reference is ``json``."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from plan_helpers import plan_of

from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan, PlanOptions
from checkpoint_tool.plan.serialize import (
    document_models,
    file_dump,
    file_json,
    plan_compact_json,
    plan_dump,
    plan_json_text,
    plan_load,
    plan_sha256,
)
from checkpoint_tool.regions import Pad, Piece, Region

PlanDocument = document_models()[Plan]

CASES = [
    ("quark-hybrid", {"tp": 2}),
    ("quark-mxfp4", {"tp": 3}),  # every expert padded: slices and pads in the pieces
    ("quark-hybrid", {"tp": 2, "layout": "vllm-sharded"}),  # stacked, concatenated, filled
    ("deepseek-v3-fp8", {"tp": 2, "fse": "on", "target": "vllm-0.33-rocm-aiter-fse"}),
    ("qwen3.5-moe-mxfp4", {"tp": 2, "layers": [0]}),  # dropped tensors
]


def reference_pretty(plan: Plan) -> str:
    return json.dumps(plan_dump(plan), indent=2, sort_keys=True)


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def reference_sha(plan: Plan) -> str:
    """The plan hash from ``json`` alone: the canonical JSON lines of the plan without its
    files, then of each file."""
    data = plan_dump(plan)
    files = data.pop("files")
    text = "".join(canonical(part) + "\n" for part in [data, *files])
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(("preset", "options"), CASES)
def test_writers_equal_json(synth_ckpt, preset, options):
    _, plan = plan_of(synth_ckpt(preset), **options)
    assert plan_json_text(plan) == reference_pretty(plan)
    for f in plan.files:
        assert file_json(f) == canonical(file_dump(f))
    whole = plan_compact_json(plan)
    assert whole == canonical(plan_dump(plan))
    assert plan_load(whole) == plan
    assert plan_sha256(plan) == reference_sha(plan)


def test_the_document_reads_back_what_the_writers_wrote(synth_ckpt):
    """The pydantic document of a plan dumps the same data the writers spell (a piece's
    ``requant`` only where set)."""
    _, plan = plan_of(synth_ckpt("quark-mxfp4"), tp=3)
    doc = PlanDocument.model_validate_json(plan_compact_json(plan))
    dumped = doc.model_dump(mode="json")
    for f in dumped["files"]:
        for t in f["tensors"]:
            for p in t["pieces"]:
                assert p.pop("requant") is None
    assert canonical(dumped) == plan_compact_json(plan)


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
    assert plan_json_text(plan) == reference_pretty(plan)
    assert file_json(f) == canonical(file_dump(f))
    assert plan_compact_json(plan) == canonical(plan_dump(plan))
    assert plan_sha256(plan) == reference_sha(plan)
    assert plan_load(json.loads(plan_json_text(plan))) == plan


def test_a_requantized_piece_is_a_field_of_its_piece():
    """``requant`` is written where set, read back, and part of the hash."""
    piece = Piece("m.weight", [Region(0, 0, 2)], requant="mxfp4")
    t = OutputTensor("m.weight", "U8", [2, 4], [piece], ops=("requantize mxfp4 <- BF16",))
    f = OutputFile("model.safetensors", [t], nbytes=8)
    plan = Plan(ckpt_version="0", source="s", recipe="r", options=PlanOptions(), files=[f])
    text = plan_json_text(plan)
    assert '"requant": "mxfp4"' in text and "@" not in text
    assert plan_json_text(plan) == reference_pretty(plan)
    assert file_json(f) == canonical(file_dump(f))
    assert plan_load(json.loads(text)).files[0].tensors[0].pieces[0] == piece
    copied = OutputTensor(t.name, t.dtype, t.shape, [piece._replace(requant=None)], ops=t.ops)
    plain = dataclasses.replace(plan, files=[OutputFile(f.name, [copied], nbytes=8)])
    assert plan_sha256(plain) != plan_sha256(plan)


def test_the_document_schema_is_the_records():
    """Each document model has its record's fields, in order, with the record's defaults."""
    for record, doc in document_models().items():
        if dataclasses.is_dataclass(record):
            fields = [(f.name, f.default, f.default_factory) for f in dataclasses.fields(record)]
        else:
            fields = [(n, record._field_defaults.get(n, dataclasses.MISSING), dataclasses.MISSING)
                      for n in record._fields]  # fmt: skip
        assert list(doc.model_fields) == [n for n, _, _ in fields], record
        for name, default, factory in fields:
            got = doc.model_fields[name]
            if factory is not dataclasses.MISSING:
                assert got.default_factory() == list(factory()) or got.default_factory() == factory()
            elif default is dataclasses.MISSING:
                assert got.is_required(), (record, name)
            elif isinstance(default, tuple):
                assert got.default_factory() == list(default), (record, name)
            else:
                assert got.default == default, (record, name)


def test_a_bad_document_is_refused_naming_the_field():
    plan = Plan(ckpt_version="0", source="s", recipe="r", options=PlanOptions(), files=[])
    data = plan_dump(plan)
    data["files"] = [{"name": "f", "tensors": [{"name": "t", "dtype": "U8", "shape": ["x"],
                                                "pieces": []}]}]  # fmt: skip
    with pytest.raises(ValueError, match="shape"):
        plan_load(data)

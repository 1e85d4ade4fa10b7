"""``quark_record``: how a Quark spec dict is read, once, for every reader of Quark specs.

The real Quark 0.13 specs (producer fixtures and the synth copies) read to the values pinned
here; the reading rules (types, lists, blocks, output/bias) hold on hand-made edge cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalog.producer_ckpt import QUARK_STEMS, producer_fixture

from checkpoint_tool.quant.configs.quark_record import QuarkLayer, QuarkSlot, QuarkTensor

SYNTH = json.loads(
    (Path(__file__).resolve().parents[2] / "checkpoint_tool/synth/quark_specs.json").read_text()
)["specs"]


def _fixture_specs() -> dict[str, dict]:
    """Every layer spec of the Quark 0.13 producer fixtures, by ``stem:key``."""
    out = {}
    for stem in QUARK_STEMS:
        qc, _ = producer_fixture(stem)
        out[f"{stem}:global"] = qc["global_quant_config"]
        for key, spec in qc["layer_quant_config"].items():
            out[f"{stem}:{key}"] = spec
    return out


FIXTURE_SPECS = _fixture_specs()

MX_W = QuarkTensor("fp4", "per_group", 32, None, "e8m0", "float", False, None, -1)
MX_I = QuarkTensor("fp4", "per_group", 32, None, "e8m0", "float", True, None, -1)
PTPC_W = QuarkTensor("fp8_e4m3", "per_channel", None, None, None, "float", False, True, 0)
PTPC_I = QuarkTensor("fp8_e4m3", "per_channel", None, None, None, "float", True, True, 1)
PT = QuarkTensor("fp8_e4m3", "per_tensor", None, None, None, "float", False, True, None)
NV = (
    QuarkTensor("fp4", "per_group", 16, None, "float32", "float32", False, None, -1),
    QuarkTensor("fp8_e4m3", "per_tensor", None, None, None, "float32", False, True, None),
)
NV_IN = (
    QuarkTensor("fp4", "per_group", 16, None, "float32", "float32", True, None, -1),
    NV[1],
)
BLOCK_W = QuarkTensor("fp8_e4m3", "per_block", None, (128, 128), None, "float32", False, True)
BLOCK_I = QuarkTensor("fp8_e4m3", "per_group", 128, None, None, "float32", True, True, -1)


def _one(t: QuarkTensor) -> QuarkSlot:
    return QuarkSlot((t,))


EXPECTED = {
    "fp8-per-tensor:global": QuarkLayer(_one(PT), _one(PT)),
    "mxfp4-global_ptpc-fp8-attn:global": QuarkLayer(_one(MX_W), _one(MX_I)),
    "mxfp4-global_ptpc-fp8-attn:*self_attn*": QuarkLayer(_one(PTPC_W), _one(PTPC_I)),
    "nvfp4:global": QuarkLayer(QuarkSlot(NV, listed=True), QuarkSlot(NV_IN, listed=True)),
    "preprocessed-per-expert_mxfp4:global": QuarkLayer(_one(MX_W), _one(MX_I)),
    "preprocessed-per-expert_mxfp4:*self_attn*": QuarkLayer(_one(PTPC_W), _one(PTPC_I)),
}
EXPECTED_SYNTH = {
    "fp8_per_block": QuarkLayer(_one(BLOCK_W), _one(BLOCK_I)),
    "fp8_per_channel": EXPECTED["mxfp4-global_ptpc-fp8-attn:*self_attn*"],
    "fp8_per_tensor": EXPECTED["fp8-per-tensor:global"],
    "mxfp4": EXPECTED["mxfp4-global_ptpc-fp8-attn:global"],
    "nvfp4": EXPECTED["nvfp4:global"],
}


def test_every_producer_fixture_spec_is_pinned():
    assert set(FIXTURE_SPECS) == set(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_quark_013_exports_read(key):
    assert QuarkLayer.parse(FIXTURE_SPECS[key]) == EXPECTED[key]


@pytest.mark.parametrize("name", sorted(SYNTH))
def test_synth_specs_read(name):
    assert set(SYNTH) == set(EXPECTED_SYNTH)
    assert QuarkLayer.parse(SYNTH[name]) == EXPECTED_SYNTH[name]


def test_values_of_the_wrong_type_read_as_absent():
    t = QuarkTensor.parse(
        {"dtype": 4, "qscheme": None, "group_size": "32", "is_dynamic": "false", "symmetric": 1}
    )
    assert t == QuarkTensor()
    assert QuarkTensor.parse({"group_size": 32.0, "ch_axis": True}).group_size == 32
    assert QuarkTensor.parse({"group_size": 32.5, "ch_axis": True}) == QuarkTensor()
    assert QuarkTensor.parse("fp8") == QuarkTensor.parse({}) == QuarkTensor()


@pytest.mark.parametrize(
    ("block_size", "block"),
    [
        ([128, 128], (128, 128)),
        ((1, 32), (1, 32)),
        ([], ()),
        (64, (64, 64)),
        (0, None),
        ("x", None),
    ],
)
def test_block_size(block_size, block):
    assert QuarkTensor.parse({"block_size": block_size}).block == block


def test_slots_keep_lists_apart_from_dicts():
    assert QuarkSlot.parse(None) is None
    plain = QuarkSlot.parse({"dtype": "fp4"})
    listed = QuarkSlot.parse([{"dtype": "fp4"}])
    assert plain is not None and listed is not None
    assert (plain.listed, plain.one, plain.plain) == (False, QuarkTensor("fp4"), QuarkTensor("fp4"))
    assert (listed.listed, listed.one, listed.plain) == (True, QuarkTensor("fp4"), None)
    two = QuarkSlot.parse([{"dtype": "fp4"}, "junk"])
    assert two is not None and two.multi and two.one is None and two.parts[1] == QuarkTensor()
    empty = QuarkSlot.parse([])
    assert empty is not None and (empty.one, empty.first, empty.multi) == (None, None, False)


def test_output_or_bias_counts_when_written_non_empty():
    assert QuarkLayer.parse({"output_tensors": {}, "bias": None}).output_or_bias == ()
    both = QuarkLayer.parse({"output_tensors": {"dtype": None}, "bias": [{}]})
    assert both.output_or_bias == ("output_tensors", "bias")


def test_text():
    layer = QuarkLayer.parse(SYNTH["fp8_per_block"])
    assert layer.text() == (
        "weight fp8_e4m3/per_block [128, 128]/static, input fp8_e4m3/per_group 128/dynamic"
    )
    assert (
        QuarkLayer.parse(SYNTH["nvfp4"])
        .text()
        .startswith("weight [fp4/per_group 16/static, fp8_e4m3/per_tensor/static], input [fp4/")
    )
    assert QuarkLayer.parse({}).text() == "weight none, input none"

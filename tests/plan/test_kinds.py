"""The planner's per-kind functions on two-tensor fixtures: no catalog, no policy, no synth.

Expectations are derived by hand from the formats (MXFP4: two values per byte, one E8M0 scale
per 32 values along the input dim, 1.0 = 0x7f; BF16: two bytes per value), independently of
the codecs the functions call.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.model.facts import MoeLayerFacts
from checkpoint_tool.plan.experts import ExpertPart, expert_modules
from checkpoint_tool.plan.kinds import (
    KEEP,
    PAD,
    REDIRECT,
    UNFUSE,
    keep,
    pad,
    redirect,
    rule_for,
    unfuse,
)
from checkpoint_tool.quant.storage.formats import storage_for_format
from checkpoint_tool.regions import Pad, Piece, Region

H, W = 64, 160  # hidden size, routed intermediate width
MXFP4 = storage_for_format("mxfp4", group_size=32, scale_dtype="U8")
BF16 = storage_for_format("unquantized", weight_dtype="BF16")


def entry(name: str, dtype: str, shape: tuple[int, ...]) -> TensorEntry:
    return TensorEntry(name, "model-00001-of-00001.safetensors", dtype, shape, 0, 0)


def layer(**kw: int) -> MoeLayerFacts:
    fields = dict(
        layer=3,
        prefix="model.layers.3.mlp",
        n_routed=4,
        n_shared=2,
        moe_intermediate_size=W,
        shared_intermediate_size=2 * W,
    )
    return MoeLayerFacts(**{**fields, **kw})


DOWN_W = entry("model.layers.3.mlp.experts.1.down_proj.weight", "U8", (H, W // 2))
DOWN_S = entry("model.layers.3.mlp.experts.1.down_proj.weight_scale", "U8", (H, W // 32))


def test_keep_is_the_tensor_as_it_is():
    p = keep(DOWN_W)
    assert p.pieces == (Piece(DOWN_W.name),) and list(p.shape) == [H, W // 2]
    assert p.ops == ("copy",) and p.copy and not p.padded


def test_pad_mxfp4_down_weight_and_its_scale_to_192():
    part = ExpertPart(layer(), "routed", "down", 1)
    w = pad(DOWN_W, "weight", MXFP4, (H, W), part, [(0, W)], target=192, width=W)
    # 32 more values on the input dim = 16 more bytes of packed FP4, zero weights
    assert w.pieces == (Piece(DOWN_W.name, (), (Pad(dim=1, amount=16, fill="00"),)),)
    assert list(w.shape) == [H, 96] and w.padded
    assert w.ops == ("pad intermediate 160 -> 192 (+32, zero weights)",)
    s = pad(DOWN_S, "scale", MXFP4, (H, W), part, [(0, W)], target=192, width=W)
    # one more group of 32: one more E8M0 scale, 1.0
    assert s.pieces == (Piece(DOWN_S.name, (), (Pad(dim=1, amount=1, fill="7f"),)),)
    assert list(s.shape) == [H, 6]
    assert s.ops == ("pad intermediate 160 -> 192 (+32, neutral scales)",)


def test_pad_of_an_aligned_expert_is_a_keep():
    part = ExpertPart(layer(), "routed", "down", 1)
    assert pad(DOWN_W, "weight", MXFP4, (H, W), part, [(0, W)], target=W, width=W) == keep(DOWN_W)


def test_pad_refuses_a_cut_inside_a_scale_group():
    part = ExpertPart(layer(), "routed", "down", 1)
    with pytest.raises(AlignmentError):  # 80 is not a whole number of groups
        pad(DOWN_W, "weight", MXFP4, (H, W), part, [(0, 80)], target=80, width=W)


def test_pad_shares_regions_between_same_shaped_experts_but_not_their_names():
    part = ExpertPart(layer(), "routed", "down", 1)
    cache: dict = {}
    other = entry("model.layers.3.mlp.experts.2.down_proj.weight", "U8", (H, W // 2))
    a = pad(DOWN_W, "weight", MXFP4, (H, W), part, [(0, W)], target=192, width=W, cache=cache)
    b = pad(other, "weight", MXFP4, (H, W), part, [(0, W)], target=192, width=W, cache=cache)
    assert len(cache) == 1 and b.pieces[0].source == other.name
    assert b.pieces[0].pads == a.pieces[0].pads and a.pieces[0].source == DOWN_W.name


def test_redirect_splits_a_widened_shared_mlp_into_two_routed_slots():
    facts = layer()
    gate = entry("model.layers.3.mlp.shared_experts.gate_proj.weight", "BF16", (2 * W, H))
    part = ExpertPart(facts, "shared", "gate")

    def place(ranges):
        return pad(gate, "weight", BF16, (2 * W, H), part, ranges, target=W, width=2 * W)

    out = redirect(gate, "weight", part, place)
    assert [c.target for c, _ in out] == [
        "model.layers.3.mlp.experts.4.gate_proj.weight",
        "model.layers.3.mlp.experts.5.gate_proj.weight",
    ]
    (first, p0), (_, p1) = out
    assert p0.pieces == (Piece(gate.name, (Region(0, 0, W),)),)
    assert p1.pieces == (Piece(gate.name, (Region(0, W, 2 * W),)),)
    assert p1.ops[0] == "fse_redirect layer 3: shared chunk 1/2 -> routed slot 5"
    assert list(p1.shape) == [W, H] and first.slot == 4


def test_redirect_labels_each_chunk_once_even_from_a_shared_template():
    facts = layer(n_shared=1, shared_intermediate_size=W)
    cache: dict = {}
    outs = []
    for proj in ("gate", "up"):
        t = entry(f"model.layers.3.mlp.shared_experts.{proj}_proj.weight", "BF16", (W, H))
        part = ExpertPart(facts, "shared", proj)

        def place(ranges, t=t, part=part):
            return pad(t, "weight", BF16, (W, H), part, ranges, target=192, width=W, cache=cache)

        outs += redirect(t, "weight", part, place)
    for _, p in outs:  # the second reuses the first's regions from the cache
        assert [o for o in p.ops if o.startswith("fse_redirect")] == [
            "fse_redirect layer 3: shared -> routed slot 4"
        ]


def test_unfuse_writes_one_tensor_per_expert_and_projection():
    facts = layer(n_routed=2, n_shared=0, shared_intermediate_size=0)
    fused = entry("model.layers.3.mlp.experts.gate_up_proj", "BF16", (2, 2 * W, H))
    part = ExpertPart(facts, "routed", "gate_up", None, True)
    out = unfuse(fused, "weight", BF16, part, target=W)
    assert [n for n, _ in out] == [
        "model.layers.3.mlp.experts.0.gate_proj.weight",
        "model.layers.3.mlp.experts.1.gate_proj.weight",
        "model.layers.3.mlp.experts.0.up_proj.weight",
        "model.layers.3.mlp.experts.1.up_proj.weight",
    ]
    _, up1 = out[3]
    assert up1.pieces == (Piece(fused.name, (Region(0, 1, 2), Region(1, W, 2 * W))),)
    assert list(up1.shape) == [W, H] and up1.ops == ("unfuse expert 1 up from the 3-D tensor",)


def test_unfuse_refuses_a_tensor_with_the_wrong_expert_count():
    facts = layer(n_routed=3, n_shared=0, shared_intermediate_size=0)
    fused = entry("model.layers.3.mlp.experts.gate_up_proj", "BF16", (2, 2 * W, H))
    with pytest.raises(InputError, match=r"expected \[3, \.\.\.\]"):
        unfuse(fused, "weight", BF16, ExpertPart(facts, "routed", "gate_up", None, True), target=W)


def test_expert_modules_names_modules_as_the_model_facts_do():
    facts = layer(n_routed=12)

    class Facts:
        moe_layers = [facts]

    modules = {facts.routed_module(e, p): (e, p) for e in range(12) for p in ("gate", "up", "down")}
    parts = expert_modules(Facts())  # type: ignore[arg-type]
    routed = {m: (p.index, p.proj) for m, p in parts.items() if p.kind == "routed"}
    assert routed == modules


def test_rule_for_picks_the_kind_from_the_expert_part_alone():
    routed = ExpertPart(layer(), "routed", "down", 1)
    shared = ExpertPart(layer(), "shared", "gate")
    fused = ExpertPart(layer(), "routed", "gate_up", None, True)
    assert fused.unfused  # DeepSeek naming: out_in, written per expert
    assert rule_for(None, fse=True, pads=True) == KEEP
    assert rule_for(routed, fse=True, pads=True) == PAD
    assert rule_for(routed, fse=False, pads=False) == KEEP
    assert rule_for(shared, fse=True, pads=False) == REDIRECT
    assert rule_for(shared, fse=False, pads=True) == PAD
    assert rule_for(fused, fse=True, pads=False) == UNFUSE

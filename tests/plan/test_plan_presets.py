"""build_plan on every synth preset: accounting, shapes, determinism, the DSV4 names."""

from __future__ import annotations

import pytest
from plan_helpers import materialize, outputs, plan_of, read

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.plan.build import plan_for_catalog
from checkpoint_tool.plan.model import PlanOptions
from checkpoint_tool.plan.serialize import plan_compact_json, plan_load
from checkpoint_tool.synth import PRESETS

ALL = sorted(PRESETS)


@pytest.mark.parametrize("preset", ALL)
@pytest.mark.parametrize("tp", [1, 2])
def test_every_source_tensor_appears_exactly_once(synth_ckpt, preset, tp):
    cat, plan = plan_of(synth_ckpt(preset, moe_intermediate=160), tp=tp)
    used = set(plan.provenance)
    dropped = {d.name for d in plan.dropped}
    assert used.isdisjoint(dropped)
    assert used | dropped == set(cat.tensors)
    # every piece reads a real source tensor, and provenance lists exactly the outputs
    names = [t.name for f in plan.files for t in f.tensors]
    assert len(names) == len(set(names))
    by_source: dict[str, list[str]] = {}
    for f in plan.files:
        for t in f.tensors:
            for src in {p.source for p in t.pieces}:
                by_source.setdefault(src, []).append(t.name)
    assert {k: sorted(v) for k, v in by_source.items()} == {
        k: sorted(v) for k, v in plan.provenance.items()
    }
    s = plan.summary
    assert s.kept + s.renamed + s.redirected + s.unfused == s.output_tensors == len(names)
    assert s.output_bytes == sum(f.nbytes for f in plan.files)


@pytest.mark.parametrize("preset", ALL)
def test_planned_shapes_match_the_bytes_the_pieces_give(synth_ckpt, preset):
    cat, plan = plan_of(synth_ckpt(preset, moe_intermediate=160), tp=4)
    outs = outputs(plan)
    # every padded/sliced tensor of one MoE layer (materialize asserts the planned shape)
    checked = 0
    for t in outs.values():
        if (
            t.layer is not None
            and t.layer == min(plan.fse_layers or {0: 0})
            and (any(p.pads or p.slices for p in t.pieces))
        ):
            materialize(cat, t)
            checked += 1
    padded = plan.summary.padded_intermediate_size != plan.summary.moe_intermediate_size
    assert checked > 0 or not padded


def test_plan_is_deterministic_whatever_the_catalog_order(synth_ckpt):
    path = synth_ckpt("quark-hybrid", moe_intermediate=160)
    a = plan_for_catalog(open_catalog(path), PlanOptions(tp=2))
    cat = open_catalog(path)
    cat.tensors = dict(reversed(list(cat.tensors.items())))
    b = plan_for_catalog(cat, PlanOptions(tp=2))
    assert plan_compact_json(a) == plan_compact_json(b)


def test_plan_json_round_trips(synth_ckpt):
    _, plan = plan_of(synth_ckpt("quark-nvfp4"), tp=2)
    again = plan_load(plan_compact_json(plan))
    assert again == plan


def test_deepseek_v4_plan_uses_the_amd_mapper_names(synth_ckpt):
    _, plan = plan_of(synth_ckpt("deepseek-v4"), tp=1)
    assert plan.recipe == "deepseek-v4-amd"
    names = set(outputs(plan))
    # the head is left for the loader's own (non-idempotent) suffix rule
    assert "head.weight" in names and "lm_head.weight" not in names
    assert "model.embed_tokens.weight" in names
    engram = [n for n in names if ".engram." in n]
    assert engram and all("embed_tokens" in n for n in engram if "embed" in n)
    assert not any(n.endswith(".scale") for n in names if not n.startswith("mtp."))
    assert any(n.startswith("mtp.") and n.endswith(".scale") for n in names)
    experts = [n for n in names if ".ffn.experts." in n and n.endswith("_scale")]
    assert experts and all(n.endswith(".weight_scale") for n in experts)
    assert all(n.startswith(("model.", "mtp.", "head.")) for n in names)


def test_wrong_recipe_reports_unmatched_tensors(synth_ckpt):
    from checkpoint_tool.errors import InputError

    with pytest.raises(
        InputError, match=r"match no rule of recipe deepseek-v4-amd: .*model\.layers"
    ):
        plan_of(synth_ckpt("deepseek-v3-fp8"), tp=1, recipe="deepseek-v4-amd")


def test_fused_3d_float_experts_are_written_per_expert(synth_ckpt):
    import torch

    cat, plan = plan_of(synth_ckpt("quark-mxfp4", moe_intermediate=160, fused_experts=True), tp=2)
    outs = outputs(plan)
    n, size, padded = cat.config["n_routed_experts"], 160, 192
    assert plan.summary.padded_intermediate_size == padded
    layers = sorted(plan.fse_layers)
    assert not any(plan.fse_layers.values())  # BF16 routed vs MXFP4 shared: no FSE
    assert plan.summary.unfused == len(layers) * n * 3
    for layer in layers:
        prefix = f"model.layers.{layer}.mlp.experts"
        assert f"{prefix}.gate_up_proj" not in outs and f"{prefix}.down_proj" not in outs
        assert len(plan.provenance[f"{prefix}.gate_up_proj"]) == 2 * n
        gate_up = read(cat, f"{prefix}.gate_up_proj").double()
        down = read(cat, f"{prefix}.down_proj").double()
        for e in (0, n - 1):
            gate = materialize(cat, outs[f"{prefix}.{e}.gate_proj.weight"]).double()
            up = materialize(cat, outs[f"{prefix}.{e}.up_proj.weight"]).double()
            dn = materialize(cat, outs[f"{prefix}.{e}.down_proj.weight"]).double()
            assert gate.shape[0] == up.shape[0] == dn.shape[1] == padded
            assert torch.equal(gate[:size], gate_up[e, :size]) and not gate[size:].any()
            assert torch.equal(up[:size], gate_up[e, size:]) and not up[size:].any()
            assert torch.equal(dn[:, :size], down[e]) and not dn[:, size:].any()
    # the loader must build these layers unquantized: their FusedMoE modules are excluded
    exclude = plan.config["quantization_config"]["exclude"]
    assert all(f"model.layers.{layer}.mlp.experts" in exclude for layer in layers)

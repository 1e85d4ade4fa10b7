"""FSE redirection: routed slots n_routed + j, chunks of n_shared > 1, scales with weights,
only on the layers the policy enabled."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml
from plan_helpers import materialize, outputs, read
from plan_helpers import plan_of as _plan_of

from checkpoint_tool.errors import AlignmentError, UsageError
from checkpoint_tool.model import MoeLayerFacts
from checkpoint_tool.plan.experts import ExpertPart
from checkpoint_tool.plan.fse import chunks
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.resolve import resolve_catalog
from checkpoint_tool.recipes import bundled_dir


def plan_of(path, **options):
    """Plans for an engine with per-layer FSE (the stock default target fuses none)."""
    options.setdefault("target", "vllm-per-layer-fse")
    return _plan_of(path, **options)


def _parts(module: str, scheme) -> dict[str, str]:
    parts = {"weight": f"{module}.weight", "scale": f"{module}.{scheme.scale_suffix}"}
    if scheme.global_scale_suffix:
        parts["global_scale"] = f"{module}.{scheme.global_scale_suffix}"
    return parts


@pytest.mark.parametrize(
    ("preset", "tp"), [("deepseek-v3-fp8", 2), ("quark-mxfp4", 1), ("quark-mxfp4", 8)]
)
def test_two_shared_experts_become_two_routed_slots_chunk_by_chunk(synth_ckpt, preset, tp):
    cat, plan = plan_of(synth_ckpt(preset, n_shared=2), tp=tp)
    rc = resolve_catalog(cat)
    outs = outputs(plan)
    n_routed = cat.config["n_routed_experts"]
    size = cat.config["moe_intermediate_size"]
    padded = plan.summary.padded_intermediate_size
    layer = min(k for k, v in plan.fse_layers.items() if v)
    for proj, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
        shared = f"model.layers.{layer}.mlp.shared_experts.{proj}"
        scheme = rc.tensors[f"{shared}.weight"].scheme
        codec = get_codec(scheme)
        whole = codec.dequantize({r: read(cat, n) for r, n in _parts(shared, scheme).items()})
        assert whole.shape[dim] == 2 * size
        for j in range(2):
            slot = f"model.layers.{layer}.mlp.experts.{n_routed + j}.{proj}"
            got = codec.dequantize(
                {r: materialize(cat, outs[n]) for r, n in _parts(slot, scheme).items()}
            ).double()
            want = whole.double().narrow(dim, j * size, size)
            pad = list(want.shape)
            pad[dim] = padded - size
            want = torch.cat([want, torch.zeros(pad, dtype=torch.float64)], dim=dim)
            assert torch.equal(got, want), (slot, j)
        # the shared module itself is gone from the output
        assert f"{shared}.weight" not in outs
        assert len(plan.provenance[f"{shared}.weight"]) == 2


def test_down_scales_split_on_dim_1_with_their_weight(synth_ckpt):
    cat, plan = plan_of(synth_ckpt("quark-mxfp4", n_shared=2), tp=1)
    outs = outputs(plan)
    layer = min(k for k, v in plan.fse_layers.items() if v)
    n = cat.config["n_routed_experts"]
    scale = outs[f"model.layers.{layer}.mlp.experts.{n + 1}.down_proj.weight_scale"]
    (region,) = scale.pieces[0].slices
    groups = cat.config["moe_intermediate_size"] // 32
    assert (region.dim, region.start, region.stop) == (1, groups, 2 * groups)
    gate = outs[f"model.layers.{layer}.mlp.experts.{n + 1}.gate_proj.weight_scale"]
    (region,) = gate.pieces[0].slices
    assert region.dim == 0


def test_single_shared_expert_moves_with_its_per_tensor_scales(synth_ckpt):
    cat, plan = plan_of(synth_ckpt("quark-nvfp4"), tp=1)
    outs = outputs(plan)
    layer = min(k for k, v in plan.fse_layers.items() if v)
    slot = f"model.layers.{layer}.mlp.experts.{cat.config['n_routed_experts']}.up_proj"
    for suffix in ("weight", "weight_scale", "weight_scale_2", "input_scale_2"):
        out = outs[f"{slot}.{suffix}"]
        src = f"model.layers.{layer}.mlp.shared_experts.up_proj.{suffix}"
        assert out.pieces[0].source == src
        got, want = materialize(cat, out), read(cat, src)
        assert got.shape == want.shape
        assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
        assert any("routed slot" in op for op in out.ops)


def test_redirect_only_on_the_layers_the_policy_enabled(synth_ckpt):
    cat, plan = plan_of(synth_ckpt("quark-hybrid"), tp=2)
    assert plan.fse_layers == {1: False, 2: False, 3: True, 4: True}
    names = set(outputs(plan))
    n = cat.config["n_routed_experts"]
    for layer in (1, 2):
        assert f"model.layers.{layer}.mlp.shared_experts.gate_proj.weight" in names
        assert f"model.layers.{layer}.mlp.experts.{n}.gate_proj.weight" not in names
    for layer in (3, 4):
        assert f"model.layers.{layer}.mlp.shared_experts.gate_proj.weight" not in names
        assert f"model.layers.{layer}.mlp.experts.{n}.gate_proj.weight" in names
    assert plan.summary.redirected == 2 * 6
    assert plan.config["ckpt"]["fse_slots"] == {"3": [n], "4": [n]}
    assert plan.config["n_routed_experts"] == n and plan.config["n_shared_experts"] == 1


def test_fse_off_keeps_every_shared_expert(synth_ckpt):
    _, plan = plan_of(synth_ckpt("quark-hybrid"), tp=2, fse="off")
    assert not any(plan.fse_layers.values()) and plan.summary.redirected == 0


def _recipe_without_fse(tmp_path):
    doc = yaml.safe_load((bundled_dir() / "deepseek-v3.yaml").read_text())
    doc["name"] = "no-fse"
    doc["fse"] = {"supported": False, "reason": "this loader has no shared-expert slots"}
    path = tmp_path / "no-fse.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_recipe_without_fse_support_keeps_shared_experts_and_says_why(synth_ckpt, tmp_path):
    path = _recipe_without_fse(tmp_path)
    _, plan = plan_of(synth_ckpt("quark-hybrid"), tp=2, recipe=str(path))
    assert plan.summary.redirected == 0
    assert any("no shared-expert slots" in n for n in plan.notes)
    with pytest.raises(UsageError, match="--fse on: recipe no-fse"):
        plan_of(synth_ckpt("quark-mxfp4"), tp=1, fse="on", recipe=str(path))


def test_per_tensor_values_cannot_be_chunked():
    layer = MoeLayerFacts(
        layer=3,
        prefix="model.layers.3.mlp",
        n_routed=8,
        n_shared=2,
        moe_intermediate_size=64,
        shared_intermediate_size=128,
    )
    part = ExpertPart(layer, "shared", "down")
    name = "model.layers.3.mlp.shared_experts.down_proj.weight_scale"
    with pytest.raises(AlignmentError, match="cannot be chunked into 2"):
        chunks(name, "weight_scale", part, ndim=0)
    got = chunks(name, "weight_scale", part, ndim=2)
    assert [(c.slot, c.target, c.ranges) for c in got] == [
        (8, "model.layers.3.mlp.experts.8.down_proj.weight_scale", [(0, 64)]),
        (9, "model.layers.3.mlp.experts.9.down_proj.weight_scale", [(64, 128)]),
    ]


def test_fused_gate_up_shared_expert_splits_into_gate_and_up_slots():
    layer = MoeLayerFacts(
        layer=1,
        prefix="model.layers.1.mlp",
        n_routed=4,
        n_shared=2,
        moe_intermediate_size=32,
        shared_intermediate_size=64,
    )
    got = chunks("x", "weight", ExpertPart(layer, "shared", "gate_up"), ndim=2)
    assert [(c.target, c.ranges) for c in got] == [
        ("model.layers.1.mlp.experts.4.gate_proj.weight", [(0, 32)]),
        ("model.layers.1.mlp.experts.4.up_proj.weight", [(64, 96)]),
        ("model.layers.1.mlp.experts.5.gate_proj.weight", [(32, 64)]),
        ("model.layers.1.mlp.experts.5.up_proj.weight", [(96, 128)]),
    ]


def test_redirected_exact_name_quant_entries_follow_the_shared_expert(synth_ckpt, tmp_path):
    import json

    src = synth_ckpt("quark-mxfp4")
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    qc = config["quantization_config"]
    spec = qc["global_quant_config"]
    shared = [
        f"model.layers.1.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")
    ]
    qc["layer_quant_config"] = {**{m: spec for m in shared}, **qc.get("layer_quant_config", {})}
    (dst / "config.json").write_text(json.dumps(config))
    cat, plan = plan_of(dst, tp=1)
    assert plan.fse_layers[1]
    n = config["n_routed_experts"]
    keys = plan.config["quantization_config"]["layer_quant_config"]
    for p in ("gate_proj", "up_proj", "down_proj"):
        assert f"model.layers.1.mlp.shared_experts.{p}" not in keys
        assert keys[f"model.layers.1.mlp.experts.{n}.{p}"] == spec
    assert any("layer_quant_config: 3 exact-name" in note for note in plan.notes)
    # the source config is not modified
    assert (
        "model.layers.1.mlp.shared_experts.gate_proj"
        in cat.config["quantization_config"]["layer_quant_config"]
    )

"""``layers.loader.CheckpointView``: runtime layers read by name from source and converted
checkpoints. Expected values come from ``safetensors`` reads and the codecs' dequantizers
(float32), compared element-wise, independent of the loader's slicing."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from checkpoint_tool.errors import InputError
from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.quant.codecs import get_codec

from . import corrupt

P1 = "model.layers.1.mlp"


def _tensor(root, name: str) -> torch.Tensor:
    index = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
    with safe_open(root / index[name], "pt") as fh:
        return fh.get_tensor(name)


def _deq(proj) -> torch.Tensor:
    return get_codec(proj.scheme).dequantize(proj.parts).float()


def test_fused_slots_hold_the_shared_chunks(converted) -> None:
    """n_shared 2: source shared MLP is 2 x I wide; slots 8 and 9 hold its two halves."""
    src, dst = converted("quark-mxfp4", tp=2, n_shared=2)
    s_view, d_view = CheckpointView.open(src, semantics="producer"), CheckpointView.open(dst)
    assert d_view.fused_slots(1) == [8, 9] and s_view.fused_slots(1) == []
    (shared,) = s_view.shared(1)
    loaded = d_view.layer(1, experts=[0])
    assert loaded.weights.n_fused_shared == 2 and not loaded.weights.shared
    inter = shared.intermediate // 2
    for j, slot in enumerate(loaded.weights.fused_shared):
        rows = slice(j * inter, (j + 1) * inter)
        assert torch.equal(_deq(slot.gate), _deq(shared.gate)[rows])
        assert torch.equal(_deq(slot.up), _deq(shared.up)[rows])
        assert torch.equal(_deq(slot.down), _deq(shared.down)[:, rows])


def test_padded_expert_is_source_plus_zeros(converted) -> None:
    src, dst = converted("deepseek-v3-fp8", tp=2)
    s_view, d_view = CheckpointView.open(src, semantics="producer"), CheckpointView.open(dst)
    s_ex, d_ex = s_view.expert(1, 5), d_view.expert(1, 5)
    assert (s_ex.intermediate, d_ex.intermediate) == (128, 256)
    assert torch.equal(_deq(d_ex.gate)[:128], _deq(s_ex.gate))
    assert not _deq(d_ex.gate)[128:].any() and not _deq(d_ex.up)[128:].any()
    assert torch.equal(_deq(d_ex.down)[:, :128], _deq(s_ex.down))
    # the raw FP8 bytes of the converted checkpoint, read by safetensors, are the loader's
    raw = _tensor(dst, f"{P1}.experts.5.gate_proj.weight")
    assert torch.equal(raw.view(torch.uint8), d_ex.gate.weight.view(torch.uint8))


def test_subset_of_experts_and_router_rows(converted) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    view = CheckpointView.open(dst)
    loaded = view.layer(1, experts=[6, 2])
    assert loaded.slot_of == {2: 0, 6: 1}
    w = loaded.weights
    assert (w.n_routed, w.n_fused_shared) == (2, 1)
    router = _tensor(dst, f"{P1}.gate.weight").float()
    assert torch.equal(w.router_weight, router[[2, 6]])
    bias = _tensor(dst, f"{P1}.gate.e_score_correction_bias").float()
    assert torch.equal(w.e_score_correction_bias, bias[[2, 6]])
    gate6 = _tensor(dst, f"{P1}.experts.6.gate_proj.weight")
    assert torch.equal(w.experts[1].gate.weight, gate6)


def test_recorded_slot_missing_is_an_error(converted, dst_copy) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.remove(bad, [f"{P1}.experts.8.up_proj.weight", f"{P1}.experts.8.up_proj.weight_scale"])
    with pytest.raises(InputError, match=r"experts\.8\.up_proj\.weight' is missing"):
        CheckpointView.open(bad).layer(1, experts=[0])


def test_missing_scale_names_the_tensor(converted, dst_copy) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.remove(bad, [f"{P1}.experts.3.down_proj.weight_scale"])
    with pytest.raises(InputError, match=r"experts\.3\.down_proj\.weight_scale"):
        CheckpointView.open(bad).expert(1, 3)


def test_fused_3d_source_experts(synth_ckpt) -> None:
    """Quark's BF16 3-D experts [E, 2I, H]: expert e's gate is rows [0, I) of slab e."""
    src = synth_ckpt("quark-mxfp4", fused_experts=True)
    view = CheckpointView.open(src, semantics="producer")
    assert view.layer_facts(1).naming.routed_layout == "fused_3d"
    assert view.fused_slots(1) == []
    ex = view.expert(1, 3)
    slab = _tensor(src, f"{P1}.experts.gate_up_proj")[3]
    inter = slab.shape[0] // 2
    assert torch.equal(ex.gate.weight, slab[:inter]) and torch.equal(ex.up.weight, slab[inter:])
    assert torch.equal(ex.down.weight, _tensor(src, f"{P1}.experts.down_proj")[3])


def test_qwen_shared_expert_gate(synth_ckpt) -> None:
    src = synth_ckpt("qwen3.5-moe-mxfp4")
    view = CheckpointView.open(src, semantics="producer")
    layer = view.facts.moe_layer_indices[0]
    router = view.router(layer)
    assert router.shared_gate is not None and router.shared_gate.shape[0] == 1
    loaded = view.layer(layer, experts=[0, 1])
    assert len(loaded.weights.shared) == 1 and loaded.weights.shared_gate_weight is not None


def test_not_a_moe_layer(converted) -> None:
    _, dst = converted("quark-mxfp4", tp=1)
    with pytest.raises(InputError, match="not a MoE layer"):
        CheckpointView.open(dst).layer(0)

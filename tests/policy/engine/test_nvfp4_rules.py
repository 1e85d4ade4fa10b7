"""NVFP4 gate/up global scales: patch one expert's up_proj scale in a copied shard and
compare with a hand computation (numbers from the file itself, not from the code)."""

from __future__ import annotations

import json
import struct

from safetensors import safe_open

from .helpers import by_rule, engine

GATE = "model.layers.1.mlp.experts.3.gate_proj"
UP = "model.layers.1.mlp.experts.3.up_proj"


def _patch(path, name, factor):
    """Multiply a 0-d F32 tensor in place; returns (old, new)."""
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shard = path / index["weight_map"][name]
    with safe_open(shard, "pt") as f:
        old = float(f.get_tensor(name))
    header_len = struct.unpack("<Q", shard.read_bytes()[:8])[0]
    header = json.loads(shard.read_bytes()[8 : 8 + header_len])
    begin = 8 + header_len + header[name]["data_offsets"][0]
    new = old * factor
    with open(shard, "r+b") as fh:
        fh.seek(begin)
        fh.write(struct.pack("<f", new))
    return old, struct.unpack("<f", struct.pack("<f", new))[0]


def _shards(synth_ckpt, *names):
    index = json.loads((synth_ckpt("quark-nvfp4") / "model.safetensors.index.json").read_text())
    return tuple({index["weight_map"][n] for n in names})


def test_equal_scales_no_finding(variant):
    found = by_rule(engine(variant("quark-nvfp4")))
    assert "nvfp4_gate_up_global_scale" not in found
    assert "nvfp4_gate_up_input_scale" not in found


def test_weight_scale_2_mismatch(variant, synth_ckpt):
    suffix = "weight_scale_2"
    path = variant("quark-nvfp4", copy=_shards(synth_ckpt, f"{UP}.{suffix}"))
    gate, _ = _patch(path, f"{GATE}.{suffix}", 1.0)
    _, up = _patch(path, f"{UP}.{suffix}", 1.25)
    [f] = by_rule(engine(path))["nvfp4_gate_up_global_scale"]
    assert f.upstream == "w1_weight_scale_2 must match w3_weight_scale_2. Accuracy may be affected."
    assert f.layers == [1]
    assert f.details["worst"]["expert"] == 3
    assert abs(f.details["max_rel"] - abs(gate - up) / max(abs(gate), abs(up))) < 1e-12
    assert abs(f.details["max_rel"] - 0.2) < 1e-6
    assert sorted(f.tensors) == [f"{GATE}.{suffix}", f"{UP}.{suffix}"]


def test_input_scale_mismatch(variant, synth_ckpt):
    suffix = "input_scale_2"
    path = variant("quark-nvfp4", copy=_shards(synth_ckpt, f"{UP}.{suffix}"))
    _patch(path, f"{UP}.{suffix}", 0.5)
    found = by_rule(engine(path))
    [f] = found["nvfp4_gate_up_input_scale"]
    assert abs(f.details["max_rel"] - 0.5) < 1e-6 and f.upstream is None
    assert "nvfp4_gate_up_global_scale" not in found

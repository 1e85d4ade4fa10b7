"""Synthetic data is validly encoded, decodes close to the drawn floats, and is deterministic.

Raw-byte checks use numpy only (independent of the codecs): no FP8 E4M3 NaN code (0x7F/0xFF),
no E8M0 NaN (255). Dequantization goes through the project codecs and is compared with the
N(0, 0.02) floats the generator drew (regenerated here from the seed).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from checkpoint_tool.catalog import open_local
from checkpoint_tool.catalog.byte_range import read_range
from checkpoint_tool.catalog.reader import read_tensor
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.synth import PRESETS, build_layout
from checkpoint_tool.synth.data import WEIGHT_STD, generator
from checkpoint_tool.synth.encodings import ENCODINGS
from checkpoint_tool.synth.layout import QuantPart

#: minimum correlation between drawn floats and dequantized values, by format
MIN_CORRELATION = {"fp8": 0.99, "fp4": 0.9}


def _raw(cat, entry) -> np.ndarray:
    return np.frombuffer(read_range(cat.path_of(entry), entry.begin, entry.end), dtype=np.uint8)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_bytes_are_valid_encodings(synth_ckpt, preset):
    path = synth_ckpt(preset)
    cat = open_local(path)
    layout = build_layout(preset)
    roles = {s.name: s.source for s in layout.tensors}
    checked = floats = 0
    for name, entry in cat.tensors.items():
        src = roles[name]
        if entry.dtype == "F8_E4M3":
            raw = _raw(cat, entry)
            assert not np.isin(raw, [0x7F, 0xFF]).any(), f"{name}: FP8 NaN code"
            checked += 1
        elif entry.dtype == "F8_E8M0" or (
            isinstance(src, QuantPart) and src.role == "scale" and entry.dtype == "U8"
        ):
            raw = _raw(cat, entry)
            assert (raw != 255).all(), f"{name}: E8M0 NaN scale"
            checked += 1
        elif entry.dtype == "I32" and isinstance(src, QuantPart) and src.role == "weight":
            checked += 1  # compressed-tensors INT4 words: every bit pattern is eight values
        elif entry.dtype in ("F32", "BF16"):
            t = read_tensor(cat, entry).float()
            assert torch.isfinite(t).all(), f"{name}: non-finite values"
            floats += 1
            if isinstance(src, QuantPart) and src.role != "weight":
                assert (t > 0).all(), f"{name}: scales must be positive"
    if PRESETS[preset].quantized:
        assert checked > 0
    else:
        assert checked == 0 and floats == len(cat.tensors)


def _modules(layout) -> dict[tuple, dict[str, str]]:
    """(module, encoding, member info) -> {role: tensor name} for quantized linears."""
    out: dict[tuple, dict[str, str]] = defaultdict(dict)
    for s in layout.tensors:
        src = s.source
        if isinstance(src, QuantPart) and ENCODINGS[src.encoding].quantized:
            key = (src.group, src.member, src.encoding, src.rows, src.inp)
            out[key][src.role] = s.name
    return out


@pytest.mark.parametrize("preset", sorted(p for p in PRESETS if PRESETS[p].quantized))
def test_quantized_weights_decode_close_to_drawn_floats(synth_ckpt, preset):
    path = synth_ckpt(preset)
    cat = open_local(path)
    layout = build_layout(preset)
    modules = _modules(layout)
    assert modules
    # every (module kind, encoding) once keeps this fast; expert 0 stands for its peers
    seen: set[tuple[str, str]] = set()
    for (group, member, enc_key, rows, inp), names in modules.items():
        module = group[member]
        kind = ".".join(p for p in module.split(".") if not p.isdigit())
        if (kind, enc_key) in seen:
            continue
        seen.add((kind, enc_key))
        enc = ENCODINGS[enc_key]
        codec = codec_for_format(
            enc.format, block=enc.block, group_size=enc.group_size, scale_dtype=enc.scale_dtype
        )
        parts = {r: read_tensor(cat, n) for r, n in names.items() if r != "input_scale"}
        got = codec.dequantize(parts).double()
        drawn = WEIGHT_STD * torch.randn((rows[member], inp), generator=generator(0, module))
        assert torch.isfinite(got).all(), module
        corr = np.corrcoef(got.flatten().numpy(), drawn.double().flatten().numpy())[0, 1]
        fmt = "fp4" if "fp4" in enc_key else "fp8"
        assert corr > MIN_CORRELATION[fmt], f"{module} ({enc_key}): correlation {corr:.3f}"


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_same_seed_same_bytes_other_seed_other_bytes(synth_ckpt, tmp_path):
    from checkpoint_tool.synth import synth_checkpoint

    a = synth_ckpt("quark-hybrid", seed=3)
    b = synth_checkpoint("quark-hybrid", tmp_path / "b", seed=3)
    c = synth_checkpoint("quark-hybrid", tmp_path / "c", seed=4)
    assert _digest(a) == _digest(b)
    da, dc = _digest(a), _digest(c)
    shards = [n for n in da if n.endswith(".safetensors")]
    assert shards and all(da[n] != dc[n] for n in shards)
    assert da["config.json"] == dc["config.json"]


def test_nvfp4_gate_and_up_share_global_and_input_scales(synth_ckpt):
    """Quark NVFP4 quirk: gate/up of one MLP carry equal weight_scale_2 and input_scale_2;
    input_scale_2 is equal across a layer's routed experts."""
    cat = open_local(synth_ckpt("quark-nvfp4"))

    def val(name: str) -> float:
        return float(read_tensor(cat, name))

    m = "model.layers.1.mlp.experts"
    assert val(f"{m}.0.gate_proj.weight_scale_2") == val(f"{m}.0.up_proj.weight_scale_2")
    assert val(f"{m}.0.gate_proj.input_scale_2") == val(f"{m}.3.up_proj.input_scale_2")
    assert val(f"{m}.0.gate_proj.weight_scale_2") != val(f"{m}.1.gate_proj.weight_scale_2")
    assert val(f"{m}.0.down_proj.input_scale_2") == val(f"{m}.5.down_proj.input_scale_2")


@pytest.mark.parametrize(
    "preset", ["quark-hybrid", "quark-nvfp4", "deepseek-v4", "quark-fp8-per-tensor"]
)
def test_codes_mode_is_validly_encoded(synth_ckpt, preset):
    """--data codes draws storage codes directly: still no NaN code, finite positive values."""
    path = synth_ckpt(preset, data="codes", n_routed=2)
    cat = open_local(path)
    layout = build_layout(preset, n_routed=2)
    for (group, member, enc_key, _rows, _inp), names in _modules(layout).items():
        enc = ENCODINGS[enc_key]
        for role, name in names.items():
            entry = cat.tensors[name]
            if entry.dtype == "F8_E4M3":
                assert not np.isin(_raw(cat, entry), [0x7F, 0xFF]).any(), name
            if entry.dtype in ("F8_E8M0", "U8") and role == "scale":
                assert (_raw(cat, entry) != 255).all(), name
        codec = codec_for_format(
            enc.format, block=enc.block, group_size=enc.group_size, scale_dtype=enc.scale_dtype
        )
        parts = {r: read_tensor(cat, n) for r, n in names.items() if r != "input_scale"}
        assert torch.isfinite(codec.dequantize(parts)).all(), group[member]
    if preset == "quark-nvfp4":
        m = "model.layers.2.mlp.shared_experts"
        gate = read_tensor(cat, f"{m}.gate_proj.weight_scale_2")
        assert float(gate) == float(read_tensor(cat, f"{m}.up_proj.weight_scale_2")) > 0

"""``ckpt tensor``: decoded values match an independent float64 reference for every format."""

from __future__ import annotations

import json
import sys

import ml_dtypes
import numpy as np
import pytest
from catalog.producer_ckpt import write_checkpoint

from checkpoint_tool.cli.app import main

FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)
M = "model.layers.0.mlp.down_proj"


def run(capsys, *args):
    argv, sys.argv = sys.argv, ["ckpt", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return int(exc.value.code), out.out, out.err


def fp4_ref(packed: np.ndarray) -> np.ndarray:
    """Element 2k in the low nibble, 2k+1 in the high nibble."""
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return FP4[codes]


def e8m0_ref(u: np.ndarray) -> np.ndarray:
    return np.where(u == 255, np.nan, np.exp2(u.astype(np.float64) - 127))


def e4m3_ref(b: np.ndarray) -> np.ndarray:
    return b.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def fp8_bytes(rng, shape, scale=100.0):
    x = np.clip(rng.standard_normal(shape) * scale, -448, 448)
    return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def quark_qc(weight, inp=None):
    return {
        "quant_method": "quark",
        "export": {},
        "global_quant_config": {"weight": weight, "input_tensors": inp},
    }


MXFP4_W = {
    "dtype": "fp4",
    "qscheme": "per_group",
    "group_size": 32,
    "scale_format": "e8m0",
    "is_dynamic": False,
}


def case_mxfp4(rng, out=64, inp=96):
    w = rng.integers(0, 256, (out, inp // 2), dtype=np.uint8)
    s = rng.integers(118, 137, (out, inp // 32), dtype=np.uint8)
    ref = fp4_ref(w) * np.repeat(e8m0_ref(s), 32, axis=1)
    tensors = {f"{M}.weight": ("U8", w.shape), f"{M}.weight_scale": ("U8", s.shape)}
    data = {f"{M}.weight": w.tobytes(), f"{M}.weight_scale": s.tobytes()}
    return {"quantization_config": quark_qc(MXFP4_W)}, tensors, data, ref


def case_nvfp4(rng, out=48, inp=64):
    w = rng.integers(0, 256, (out, inp // 2), dtype=np.uint8)
    s = (
        (np.abs(rng.standard_normal((out, inp // 16))) + 0.05)
        .astype(ml_dtypes.float8_e4m3fn)
        .view(np.uint8)
    )
    g = np.array(rng.uniform(1e-3, 1e-2), dtype=np.float32)
    ref = fp4_ref(w) * np.repeat(e4m3_ref(s), 16, axis=1) * float(g)
    part = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}
    qc = quark_qc(
        [{"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": False}, part],
        [{"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": True}, part],
    )
    tensors = {
        f"{M}.weight": ("U8", w.shape),
        f"{M}.weight_scale": ("F8_E4M3", s.shape),
        f"{M}.weight_scale_2": ("F32", ()),
        f"{M}.input_scale_2": ("F32", ()),
    }
    data = {
        f"{M}.weight": w.tobytes(),
        f"{M}.weight_scale": s.tobytes(),
        f"{M}.weight_scale_2": g.tobytes(),
    }
    return {"quantization_config": qc}, tensors, data, ref


def case_fp8_block(rng, out=300, inp=200):
    w = fp8_bytes(rng, (out, inp))
    s = rng.uniform(1e-4, 1e-2, (3, 2)).astype(np.float32)
    ref = e4m3_ref(w) * np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[:out, :inp]
    qc = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    tensors = {f"{M}.weight": ("F8_E4M3", w.shape), f"{M}.weight_scale_inv": ("F32", s.shape)}
    data = {f"{M}.weight": w.tobytes(), f"{M}.weight_scale_inv": s.tobytes()}
    return {"quantization_config": qc}, tensors, data, ref


def case_fp8_channel_bf16(rng, out=40, inp=24):
    w = fp8_bytes(rng, (out, inp))
    s = rng.uniform(1e-3, 1e-1, out).astype(ml_dtypes.bfloat16)
    ref = e4m3_ref(w) * s.astype(np.float64)[:, None]
    qc = quark_qc(
        {"dtype": "fp8_e4m3", "qscheme": "per_channel", "ch_axis": 0, "is_dynamic": False}
    )
    tensors = {f"{M}.weight": ("F8_E4M3", w.shape), f"{M}.weight_scale": ("BF16", s.shape)}
    data = {f"{M}.weight": w.tobytes(), f"{M}.weight_scale": s.tobytes()}
    return {"quantization_config": qc}, tensors, data, ref


def case_dsv4_fp4_expert(rng, out=32, inp=64):
    name = "layers.2.ffn.experts.5.w2"
    w = rng.integers(-128, 128, (out, inp // 2), dtype=np.int8)
    s = rng.integers(120, 134, (out, inp // 32), dtype=np.uint8)
    ref = fp4_ref(w.view(np.uint8)) * np.repeat(e8m0_ref(s), 32, axis=1)
    config = {
        "model_type": "deepseek_v4",
        "expert_dtype": "fp4",
        "quantization_config": {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "scale_fmt": "ue8m0",
        },
    }
    tensors = {f"{name}.weight": ("I8", w.shape), f"{name}.scale": ("F8_E8M0", s.shape)}
    data = {f"{name}.weight": w.tobytes(), f"{name}.scale": s.tobytes()}
    return config, tensors, data, ref


CASES = {
    "mxfp4": (case_mxfp4, M),
    "nvfp4": (case_nvfp4, M),
    "fp8-block-partial": (case_fp8_block, M),
    "fp8-channel-bf16": (case_fp8_channel_bf16, M),
    "dsv4-fp4-expert": (case_dsv4_fp4_expert, "layers.2.ffn.experts.5.w2"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_dequant_matches_float64_reference(tmp_path, capsys, monkeypatch, case, seed):
    import checkpoint_tool.quant.tensor_report as tr

    monkeypatch.setattr(tr, "CHUNK_ELEMS", 1000)  # several row chunks even for tiny tensors
    make, module = CASES[case]
    config, tensors, data, ref = make(np.random.default_rng(seed))
    root = write_checkpoint(
        tmp_path / case, tensors, {"model_type": "deepseek_v3", **config}, data=data, seed=seed
    )
    out = tmp_path / "w.npy"
    code, stdout, err = run(
        capsys, "tensor", str(root), module, "--dequant", "--out", str(out), "--format", "json"
    )
    assert code == 0, err
    got = np.load(out, allow_pickle=False)
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref.astype(np.float32))
    rep = json.loads(stdout)
    assert rep["decoded"] == "dequantized" and rep["logical_shape"] == list(ref.shape)
    v = rep["values"]
    r32 = ref.astype(np.float32).astype(np.float64)  # stats are over the float32 values
    assert (v["min"], v["max"], v["absmax"]) == (r32.min(), r32.max(), np.abs(r32).max())
    assert v["mean"] == pytest.approx(ref.mean(), rel=1e-6, abs=1e-9)
    assert (v["nan"], v["inf"], v["count"]) == (0, 0, ref.size)
    assert not list(tmp_path.glob(".w.npy.partial"))


def test_e8m0_255_is_nan_and_reported(tmp_path, capsys):
    config, tensors, data, _ = case_mxfp4(np.random.default_rng(3))
    s = np.frombuffer(data[f"{M}.weight_scale"], dtype=np.uint8).copy()
    s[5] = 255
    data[f"{M}.weight_scale"] = s.tobytes()
    root = write_checkpoint(tmp_path / "c", tensors, config, data=data)
    code, stdout, _ = run(capsys, "tensor", str(root), f"{M}.weight", "--format", "json")
    rep = json.loads(stdout)
    assert code == 0 and rep["values"]["nan"] == 32
    (scale,) = rep["scales"]
    assert (scale["e8m0_nan"], scale["non_finite"], scale["non_positive"]) == (1, 1, 0)
    code, stdout, _ = run(capsys, "tensor", str(root), f"{M}.weight_scale", "--format", "json")
    assert json.loads(stdout)["scales"][0]["e8m0_nan"] == 1
    assert json.loads(stdout)["role"] == "scale"


def test_human_output_names_scheme_and_rule(tmp_path, capsys):
    config, tensors, data, _ = case_fp8_block(np.random.default_rng(4))
    root = write_checkpoint(tmp_path / "c", tensors, config, data=data)
    code, stdout, _ = run(capsys, "tensor", str(root), M)
    assert code == 0
    assert "fp8_block[128,128]" in stdout and "quant_method fp8" in stdout
    assert f"{M}.weight_scale_inv" in stdout


def test_unquantized_tensor_stats(tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    root = write_checkpoint(
        tmp_path / "c",
        {"model.norm.weight": ("BF16", x.shape)},
        {"model_type": "llama"},
        data={"model.norm.weight": x.tobytes()},
    )
    out = tmp_path / "n.npy"
    code, stdout, _ = run(
        capsys,
        "tensor",
        str(root),
        "model.norm",
        "--dequant",
        "--out",
        str(out),
        "--format",
        "json",
    )
    rep = json.loads(stdout)
    assert code == 0 and rep["decoded"] == "as stored" and rep["scheme"]["format"] == "unquantized"
    np.testing.assert_array_equal(np.load(out), x.astype(np.float32))


@pytest.mark.parametrize(
    "args", [["--dequant"], ["--out", "x.npy"], ["--dequant", "--out", "x.txt"]]
)
def test_option_misuse_is_a_usage_error(tmp_path, capsys, args):
    config, tensors, data, _ = case_mxfp4(np.random.default_rng(6))
    root = write_checkpoint(tmp_path / "c", tensors, config, data=data)
    code, _, err = run(capsys, "tensor", str(root), M, *args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1

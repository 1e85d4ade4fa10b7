"""Every bad input (truncated shard, bad header or offsets, an index pointing outside, a missing
or misshapen scale, a bad quantization_config, an unknown name) gives one clear line, exit code
2 and no traceback (ckpt tensor)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.producer_ckpt import write_checkpoint
from checkpoint_tool.catalog import INDEX_NAME
from checkpoint_tool.cli.app import main

W = "model.layers.0.mlp.down_proj"
MXFP4_QC = {
    "quant_method": "quark",
    "export": {"kv_cache_group": [], "pack_method": "reorder"},
    "exclude": ["lm_head"],
    "global_quant_config": {
        "weight": {
            "dtype": "fp4",
            "qscheme": "per_group",
            "group_size": 32,
            "is_dynamic": False,
            "scale_format": "e8m0",
        },
        "input_tensors": {
            "dtype": "fp4",
            "qscheme": "per_group",
            "group_size": 32,
            "is_dynamic": True,
            "scale_format": "e8m0",
        },
    },
}
TENSORS = {
    f"{W}.weight": ("U8", (64, 32)),
    f"{W}.weight_scale": ("U8", (64, 2)),
    "model.norm.weight": ("BF16", (64,)),
}


def _ckpt(tmp_path: Path, tensors=TENSORS, qc=MXFP4_QC, shards: int = 1) -> Path:
    return write_checkpoint(
        tmp_path / "ckpt",
        dict(tensors),
        {"model_type": "deepseek_v3", "quantization_config": qc},
        shards=shards,
    )


def _raw_file(path: Path, header: dict, data_len: int) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\x01" * data_len)


def _run(capsys, *args: str) -> tuple[int, str]:
    argv = sys.argv
    sys.argv = ["ckpt", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    err = capsys.readouterr().err
    return int(exc.value.code), err


def _assert_one_line(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_truncated_shard(tmp_path, capsys):
    root = _ckpt(tmp_path)
    f = root / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-7])
    _assert_one_line(
        *_run(capsys, "tensor", str(root), f"{W}.weight"), "model.safetensors", "truncated"
    )


def test_header_length_beyond_file_size(tmp_path, capsys):
    root = _ckpt(tmp_path)
    f = root / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[:8] = struct.pack("<Q", len(data) + 100)
    f.write_bytes(bytes(data))
    _assert_one_line(
        *_run(capsys, "tensor", str(root), f"{W}.weight"), "model.safetensors", "header length"
    )


def test_non_json_header(tmp_path, capsys):
    root = _ckpt(tmp_path)
    f = root / "model.safetensors"
    data = bytearray(f.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8 : 8 + n] = b"{oops" + b" " * (n - 5)
    f.write_bytes(bytes(data))
    _assert_one_line(
        *_run(capsys, "tensor", str(root), f"{W}.weight"), "model.safetensors", "not valid JSON"
    )


@pytest.mark.parametrize(
    ("header", "data_len", "needle"),
    [
        (
            {
                "a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]},
            },
            12,
            "overlap",
        ),
        ({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}, 4, "past the end"),
        ({"a": {"dtype": "U8", "shape": [8], "data_offsets": [8, 4]}}, 8, "malformed"),
        ({"a": {"dtype": "Q7", "shape": [8], "data_offsets": [0, 8]}}, 8, "unknown dtype"),
    ],
    ids=["overlapping", "out-of-range", "reversed", "unknown-dtype"],
)
def test_bad_offsets_and_dtypes(tmp_path, capsys, header, data_len, needle):
    root = tmp_path / "raw"
    root.mkdir()
    _raw_file(root / "model.safetensors", header, data_len)
    code, err = _run(capsys, "tensor", str(root), "a")
    _assert_one_line(code, err, "model.safetensors", needle)


@pytest.mark.parametrize(
    ("target", "needle"),
    [("model-00009-of-00009.safetensors", "missing"), ("../outside.safetensors", "outside")],
)
def test_index_points_at_missing_or_outside_file(tmp_path, capsys, target, needle):
    root = _ckpt(tmp_path, shards=2)
    (tmp_path / "outside.safetensors").write_bytes(
        (root / "model-00001-of-00002.safetensors").read_bytes()
    )
    index = json.loads((root / INDEX_NAME).read_text())
    index["weight_map"]["model.norm.weight"] = target
    (root / INDEX_NAME).write_text(json.dumps(index))
    _assert_one_line(*_run(capsys, "tensor", str(root), "model.norm.weight"), INDEX_NAME, needle)


def test_scale_tensor_missing(tmp_path, capsys):
    tensors = {k: v for k, v in TENSORS.items() if not k.endswith("weight_scale")}
    root = _ckpt(tmp_path, tensors)
    _assert_one_line(
        *_run(capsys, "tensor", str(root), W), f"{W}.weight_scale", "missing", "mxfp4/32"
    )


def test_scale_tensor_of_wrong_shape(tmp_path, capsys):
    root = _ckpt(tmp_path, {**TENSORS, f"{W}.weight_scale": ("U8", (64, 3))})
    _assert_one_line(
        *_run(capsys, "tensor", str(root), W), f"{W}.weight_scale", "[64, 3]", "[64, 2]"
    )


@pytest.mark.parametrize(
    ("qc", "needle"),
    [
        ({"quant_method": "awq", "bits": 4}, "'awq' is not supported"),
        ({**MXFP4_QC, "exclude": "lm_head"}, "exclude"),
        ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ],
    ids=["unsupported-method", "malformed-quark", "fp8-block-size"],
)
def test_unsupported_or_malformed_quant_config(tmp_path, capsys, qc, needle):
    root = _ckpt(tmp_path, qc=qc)
    _assert_one_line(*_run(capsys, "tensor", str(root), W), "config.json", needle)


def test_unknown_tensor_name(tmp_path, capsys):
    root = _ckpt(tmp_path)
    _assert_one_line(*_run(capsys, "tensor", str(root), "model.nope.weight"), "'model.nope.weight'")


def test_console_script_prints_no_traceback(tmp_path):
    root = _ckpt(tmp_path, {k: v for k, v in TENSORS.items() if not k.endswith("weight_scale")})
    proc = subprocess.run(
        [sys.executable, "-m", "checkpoint_tool", "tensor", str(root), W],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["a\\ud800.weight", "b.\\udfff"])
def test_name_with_a_lone_surrogate(tmp_path, capsys, name):
    """JSON can spell a name no UTF-8 file holds (a lone surrogate escape): refused by name,
    before anything encodes it."""
    root = tmp_path / "ckpt"
    root.mkdir()
    entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    raw = f'{{"{name}":{entry}}}'.encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    _assert_one_line(
        *_run(capsys, "inspect", str(root), "--format", "json"),
        "model.safetensors",
        "not valid UTF-8",
    )

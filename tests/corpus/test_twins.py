"""The twin writer itself: case files expand as declared, twins are readable safetensors.

These checks read the files with their own header parser (not ckpt's), so a writer fault
cannot hide behind the reader it is meant to test.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import twins


def _header(path: Path) -> tuple[int, dict]:
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return 8 + n, json.loads(fh.read(n))


@pytest.mark.parametrize("name", twins.case_names())
def test_case_file_is_complete(name: str) -> None:
    """Every case cites its sources; a built case also expands without duplicate names into
    tensors of known dtypes (the tiny twin here; the harness expands the full one) and states
    the facts the harness checks."""
    case = twins.load_case(name)
    assert case.get("sources"), f"{name}: no sources"
    assert all("from" in s and "fact" in s for s in case["sources"]), name
    if case.get("skip"):
        return
    _, _, tensors, _ = twins.twin_files(case, "tiny")
    assert tensors and all(t.dtype in twins.DTYPES for t in tensors), name
    for key in ("moe_layers", "n_routed", "routed_width", "shared_width", "tp", "tiny_tp"):
        assert key in case["expect"], f"{name}: expect.{key} missing"


def test_published_counts() -> None:
    """DeepSeek-R1's published index has 91,991 tensors (61 layers + MTP layer 61, 163
    shards); Kimi-K2 shards are named model-K-of-61."""
    _, _, tensors, shards = twins.twin_files(twins.load_case("deepseek-r1-0528"), "full")
    assert (len(tensors), shards) == (91_991, 163)
    assert twins.load_case("kimi-k2-instruct")["index"]["name"] == "model-{k}-of-{n}.safetensors"


def test_amd_exclude_list_is_of_real_size() -> None:
    config, _, _, _ = twins.twin_files(twins.load_case("amd-deepseek-r1-0528-mxfp4"), "full")
    exclude = config["quantization_config"]["exclude"]
    assert len(exclude) == len(set(exclude)) == 1084
    assert "model.layers.61.mlp.experts.255.down_proj" in exclude


def test_full_twin_is_sparse_and_sized(tmp_path: Path) -> None:
    """Each shard is its header plus exactly the tensors' bytes, mostly holes."""
    case = twins.load_case("qwen3-30b-a3b")
    dst = twins.write_twin(case, "full", tmp_path / "full")
    index = json.loads((dst / twins.INDEX).read_text())
    shards = sorted(dst.glob("*.safetensors"))
    assert len(shards) == case["index"]["shards"] == len(set(index["weight_map"].values()))
    logical = 0
    for shard in shards:
        start, header = _header(shard)
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        assert shard.stat().st_size == start + end
        logical += shard.stat().st_size
    assert twins.sparse_size(dst) < logical / 1000


def test_tiny_twin_holds_valid_codes(tmp_path: Path) -> None:
    """FP8 weights hold no NaN code, E8M0 scales no 255, float scales are positive."""
    dst = twins.write_twin(twins.load_case("nvidia-deepseek-r1-0528-fp4"), "tiny", tmp_path / "t")
    seen = set()
    for shard in sorted(dst.glob("*.safetensors")):
        start, header = _header(shard)
        raw = shard.read_bytes()[start:]
        for name, h in header.items():
            if name == "__metadata__":
                continue
            data = raw[h["data_offsets"][0] : h["data_offsets"][1]]
            if h["dtype"] == "F8_E4M3":
                codes = np.frombuffer(data, np.uint8)
                assert not np.isin(codes, (0x7F, 0xFF)).any(), name
            if h["dtype"] == "F32" and name.endswith(("_scale_2", "input_scale")):
                assert (np.frombuffer(data, np.float32) > 0).all(), name
            seen.add(h["dtype"])
    assert {"F8_E4M3", "U8", "F32", "BF16"} <= seen

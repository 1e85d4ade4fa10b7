"""The full-size DeepSeek-R1 layout (sparse) served remotely: inspect stays under 25 MB."""

from __future__ import annotations

import json
import struct

import pytest

from tests.remote.hub_server import HubRepo, HubServer


@pytest.mark.slow
def test_remote_inspect_of_full_size_r1_transfers_headers_only(synth_ckpt, ckpt, monkeypatch):
    r1 = synth_ckpt("deepseek-v3-fp8", sparse=True)
    shards = sorted(r1.glob("*.safetensors"))
    need = sum((r1 / n).stat().st_size for n in ("config.json", "model.safetensors.index.json"))
    for p in shards:
        with open(p, "rb") as fh:
            need += 8 + struct.unpack("<Q", fh.read(8))[0]
    with HubServer({"deepseek-ai/DeepSeek-R1": HubRepo(r1, hash_lfs=False)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        code, out, err = ckpt("inspect", "hf://deepseek-ai/DeepSeek-R1@main", "--format", "json")
    assert code in (0, 1), err
    model = json.loads(out)["model"]
    assert model["tensors"] == 91991 and model["files"] == 163
    assert model["bytes_transferred"] == hub.bytes_sent
    assert need <= hub.bytes_sent <= need + (64 << 10) * len(shards)
    assert hub.bytes_sent < 25 * 2**20

"""Small, realistic checkpoints for validate tests, and ways to break them.

``build_checkpoint`` writes the exact tensor names, dtypes and shapes of a real AMD Quark 0.13
export (tiny DeepSeek-V3: MXFP4 experts and MLPs, per-channel FP8 attention, BF16 router and
norms; ``tests/fixtures/producer-headers``) with its real ``quantization_config``, as two
shards plus an index, through our atomic ``SafetensorsWriter``. Data is fresh random bytes of
valid encodings (E8M0 scales in 2^-10..2^-6 like trained weights, E4M3 codes without NaN,
positive BF16 scales).

``mutate`` edits the tensor table (name -> ``(dtype, shape, bytes)``) and the config before
writing, so a test can build "what a buggy exporter would write"; ``corrupt_*`` helpers damage
files after writing.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.execute.writer import SafetensorsWriter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "producer-headers"
STEM = "quark-0.13_tiny-deepseek_v3_preprocessed-per-expert_mxfp4"
#: every Quark export copied in tests/fixtures -> its model's moe_intermediate_size (the
#: fused 3-D exports come from a model with I = 128, the per-expert one from I = 192)
STEMS = {
    STEM: 192,
    "quark-0.13_tiny-deepseek_v3_fp8-per-tensor": 128,
    "quark-0.13_tiny-deepseek_v3_mxfp4-global_ptpc-fp8-attn": 128,
    "quark-0.13_tiny-deepseek_v3_nvfp4": 128,
}
INDEX = "model.safetensors.index.json"

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 192,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    # as DeepSeek-V3 writes them: vLLM registers the router's e_score_correction_bias (which
    # the producer exports carry) only for noaux_tc
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "vocab_size": 512,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

Table = dict[str, tuple[str, tuple[int, ...], bytes]]


def producer_specs(stem: str = STEM) -> dict[str, tuple[str, tuple[int, ...]]]:
    doc = json.loads((FIXTURES / f"{stem}.tensors.json").read_text())
    return {name: (dtype, tuple(shape)) for name, (dtype, shape) in doc.items()}


def quant_config(stem: str = STEM) -> dict:
    return json.loads((FIXTURES / f"{stem}.quantization_config.json").read_text())


def random_bytes(name: str, dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> bytes:
    """Valid random data for one tensor, by its role (scale or not) and dtype."""
    n = math.prod(shape)
    is_scale = "scale" in name.rsplit(".", 1)[-1]
    if dtype == "U8" and is_scale:  # E8M0: 2^-10 .. 2^-6 (weights of magnitude ~0.01)
        return rng.integers(117, 122, size=n, dtype=np.uint8).tobytes()
    if dtype == "U8":  # packed FP4 pairs: every byte is valid
        return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if dtype == "F8_E4M3" and is_scale:  # positive normal codes (NVFP4 group scales)
        return rng.integers(0x28, 0x48, size=n, dtype=np.uint8).tobytes()
    if dtype == "F8_E4M3":  # any code but the NaNs 0x7F / 0xFF
        codes = rng.integers(0, 255, size=n, dtype=np.uint8)
        codes[(codes & 0x7F) == 0x7F] = 0x38
        return codes.tobytes()
    if dtype in ("BF16", "F32"):
        x = rng.standard_normal(n).astype(np.float32)
        if is_scale:
            x = np.abs(x) * 0.01 + 1e-3
        if dtype == "F32":
            return x.tobytes()
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    raise ValueError(f"no random data rule for {dtype}")


def tensor_table(seed: int = 0, stem: str = STEM) -> Table:
    rng = np.random.default_rng(seed)
    return {
        name: (dtype, shape, random_bytes(name, dtype, shape, rng))
        for name, (dtype, shape) in sorted(producer_specs(stem).items())
    }


def shard_of(name: str) -> int:
    """Layer 0 and globals in shard 1, layer 1 in shard 2 (like a real split)."""
    return 2 if name.startswith("model.layers.1.") else 1


def write_checkpoint(
    dst: Path,
    table: Table,
    config: dict,
    *,
    shards: Callable[[str], int] = shard_of,
    total_size: str | int = "tensors",
) -> Path:
    """Write ``table`` as shards + index + config.json into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    groups: dict[int, list[str]] = {}
    for name in sorted(table):
        groups.setdefault(shards(name), []).append(name)
    count = len(groups)
    weight_map: dict[str, str] = {}
    file_bytes = 0
    for i, (_, names) in enumerate(sorted(groups.items()), start=1):
        fname = f"model-{i:05d}-of-{count:05d}.safetensors"
        specs = [(n, table[n][0], table[n][1]) for n in names]
        with SafetensorsWriter(dst / fname, specs, metadata={"format": "pt"}) as w:
            for n in names:
                w.write(n, table[n][2])
        file_bytes += w.size
        weight_map.update({n: fname for n in names})
    tensor_bytes = sum(tensor_nbytes(d, s) for d, s, _ in table.values())
    size = {"tensors": tensor_bytes, "files": file_bytes}.get(total_size, total_size)  # type: ignore[call-overload]
    index = {"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))}
    (dst / INDEX).write_text(json.dumps(index, indent=2))
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def build_checkpoint(
    dst: Path,
    *,
    seed: int = 0,
    stem: str = STEM,
    mutate: Callable[[Table, dict], None] | None = None,
    **kwargs,
) -> Path:
    """A tiny DeepSeek-V3 checkpoint as Quark exported it (``stem``: which export; default the
    per-expert MXFP4 one), optionally mutated before writing."""
    table = tensor_table(seed, stem)
    config = {
        **CONFIG,
        "moe_intermediate_size": STEMS[stem],
        "quantization_config": quant_config(stem),
    }
    if mutate is not None:
        mutate(table, config)
    return write_checkpoint(dst, table, config, **kwargs)


# -- damage after writing ----------------------------------------------------------------------


def shard_holding(dst: Path, name: str) -> Path:
    index = json.loads((dst / INDEX).read_text())
    return dst / index["weight_map"][name]


def read_header_doc(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def rewrite_header(path: Path, edit: Callable[[dict], None]) -> None:
    """Edit the JSON header and rewrite the file with the same data region."""
    raw = path.read_bytes()
    n, doc = read_header_doc(path)
    edit(doc)
    new = json.dumps(doc, separators=(",", ":")).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n :])


def poke_tensor(dst: Path, name: str, offset: int, data: bytes) -> None:
    """Overwrite bytes of tensor ``name`` at ``offset`` (within the tensor)."""
    path = shard_holding(dst, name)
    n, doc = read_header_doc(path)
    begin = 8 + n + doc[name]["data_offsets"][0]
    raw = bytearray(path.read_bytes())
    raw[begin + offset : begin + offset + len(data)] = data
    path.write_bytes(bytes(raw))

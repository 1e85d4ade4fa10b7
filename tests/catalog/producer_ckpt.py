"""Build small checkpoints with exactly a producer's tensor names, dtypes and shapes.

Data is random but *valid* for each role: floats are finite normals, FP8 weights are encoded
finite E4M3, packed FP4 bytes are any byte (every nibble is a code), E8M0 scales stay in
[2**-8, 2**8] (never 255), E4M3 / float scales are positive.

Example::

    qc, tensors = producer_fixture("mxfp4-global_ptpc-fp8-attn")
    root = write_checkpoint(tmp_path, tensors, {"model_type": "deepseek_v3",
                                                 "quantization_config": qc})
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from checkpoint_tool.catalog import INDEX_NAME
from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.execute.writer import SafetensorsWriter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "producer-headers"
QUARK_STEMS = (
    "mxfp4-global_ptpc-fp8-attn",
    "nvfp4",
    "fp8-per-tensor",
    "preprocessed-per-expert_mxfp4",
)
_SCALE_SUFFIXES = ("weight_scale", "weight_scale_inv", "scale", "weight_scale_2")
_ACT_SUFFIXES = ("input_scale", "input_scale_2")

Tensors = dict[str, tuple[str, tuple[int, ...]]]


def producer_fixture(stem: str) -> tuple[dict, Tensors]:
    """(quantization_config, {name: (dtype, shape)}) of a Quark 0.13 tiny DeepSeek-V3 export."""
    base = f"quark-0.13_tiny-deepseek_v3_{stem}"
    qc = json.loads((FIXTURES / f"{base}.quantization_config.json").read_text())
    raw = json.loads((FIXTURES / f"{base}.tensors.json").read_text())
    return qc, {n: (dt, tuple(sh)) for n, (dt, sh) in raw.items()}


def fixture_json(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def random_bytes(name: str, dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> bytes:
    """Valid random storage bytes for one tensor, chosen by dtype and name suffix."""
    n = int(np.prod(shape)) if shape else 1
    suffix = name.rsplit(".", 1)[-1]
    is_scale = suffix in _SCALE_SUFFIXES or suffix in _ACT_SUFFIXES
    if dtype in ("BF16", "F16", "F32"):
        x = rng.standard_normal(n)
        if is_scale:
            x = np.abs(x) * 0.01 + 1e-3
        np_dtype = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32}[dtype]
        return x.astype(np_dtype).tobytes()
    if dtype == "F8_E4M3":
        x = rng.standard_normal(n) * (0.5 if is_scale else 100.0)
        if is_scale:
            x = np.abs(x) + 0.02
        return np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).tobytes()
    if dtype in ("U8", "I8", "F8_E8M0"):
        if is_scale:  # E8M0 exponents near 1.0
            return rng.integers(119, 136, size=n, dtype=np.uint8).tobytes()
        return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if dtype in ("I32", "I64", "I16"):
        return rng.integers(-(2**15), 2**15, size=n).astype(f"<i{int(dtype[1:]) // 8}").tobytes()
    if dtype == "F4":
        return rng.integers(0, 256, size=tensor_nbytes("F4", shape), dtype=np.uint8).tobytes()
    raise ValueError(f"no random data for dtype {dtype}")


def write_checkpoint(
    dst: Path,
    tensors: Tensors,
    config: dict | None,
    *,
    shards: int = 1,
    seed: int = 0,
    hf_quant_config: dict | None = None,
    data: dict[str, bytes] | None = None,
) -> Path:
    """Write ``tensors`` into ``shards`` files (+ index when more than one) and config files."""
    dst.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = sorted(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map: dict[str, str] = {}
    for k, group in enumerate(groups):
        fname = (
            "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        )
        items = [(n, tensors[n][0], tensors[n][1]) for n in group]
        with SafetensorsWriter(dst / fname, items, metadata={"format": "pt"}) as w:
            for n, dt, sh in items:
                blob = (data or {}).get(n)
                w.write(n, blob if blob is not None else random_bytes(n, dt, sh, rng))
        weight_map.update({n: fname for n in group})
    if shards > 1:
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (dst / INDEX_NAME).write_text(json.dumps(index, indent=2))
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config, indent=2))
    if hf_quant_config is not None:
        (dst / "hf_quant_config.json").write_text(json.dumps(hf_quant_config, indent=2))
    return dst


def quark_checkpoint(dst: Path, stem: str, **kw: object) -> Path:
    """A Quark 0.13 producer export rebuilt with valid random data."""
    qc, tensors = producer_fixture(stem)
    config = {"model_type": "deepseek_v3", "quantization_config": qc}
    return write_checkpoint(dst, tensors, config, **kw)  # type: ignore[arg-type]

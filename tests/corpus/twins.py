"""Twins of published checkpoints, built from a case file (``tests/corpus/cases/*.yaml``).

A case holds the published ``config.json``, the producer's quant config files, the index
layout (shard count) and every tensor as a generator: a name pattern with ranges, a dtype and
a shape written over *dims* (symbols read from the config, e.g. ``H: hidden_size``). Two
twins come from one case:

- ``full``: the published sizes, written as sparse files (header, then a hole), like
  ``ckpt synth --sparse``; a 700 GB layout takes seconds and no disk.
- ``tiny``: the case's ``tiny.config`` overrides merged into the config, the dims re-read
  from it, the same generators expanded, and real random data (valid FP8 / FP4 codes,
  positive scales), so conversion and numeric verification have something to check.

Example of a tensor generator (one line of a case)::

    - {n: "model.layers.{l}.mlp.experts.{e}.{p}", q: fp8_block_inv, s: [I, H],
       for: {l: "K..N-1", e: "0..E-1", p: [gate_proj, up_proj]}}

``q`` names a storage scheme (``SCHEMES``): the module's weight and its scale tensors with
their dtypes and shapes, as the producer writes them; without ``q``, ``n`` is one tensor of
dtype ``d``. Ranges are ``"a..b"`` (inclusive, expressions over dims) or lists; ``where`` is
an expression over the loop variables and dims that keeps only some combinations.
A case's ``root`` (an expression over ``l``) names the block of layer ``l`` as ``{root}``.
Config values ``{"$names": generator}`` expand to a list of names (exclude lists),
``{"$expr": "..."}`` to the value of an expression over dims (per-layer lists).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from checkpoint_tool.catalog.safetensors_format import build_header, tensor_nbytes

CASES = Path(__file__).parent / "cases"
#: safetensors dtypes the case files use
DTYPES = {"BF16", "F16", "F32", "F8_E4M3", "F8_E8M0", "U8", "I8", "I32", "I64"}
INDEX = "model.safetensors.index.json"

#: scheme -> [(suffix, dtype, shape over o=out rows, i=in columns)]: the producer's storage
SCHEMES: dict[str, list[tuple[str, str, str]]] = {
    "bf16": [(".weight", "BF16", "[o, i]")],
    # DeepSeek native / Qwen FP8 / MiniMax FP8: 128x128 blocks, F32 scale_inv, ceil-shaped
    "fp8_block_inv": [
        (".weight", "F8_E4M3", "[o, i]"),
        (".weight_scale_inv", "F32", "[cdiv(o, 128), cdiv(i, 128)]"),
    ],
    # AMD Quark OCP MXFP4: packed pairs (U8), E8M0 scale per 32 (U8)
    "quark_mxfp4": [
        (".weight", "U8", "[o, i // 2]"),
        (".weight_scale", "U8", "[o, i // 32]"),
    ],
    # NVIDIA ModelOpt NVFP4: packed pairs, E4M3 scale per 16, F32 global and input scales
    "modelopt_nvfp4": [
        (".weight", "U8", "[o, i // 2]"),
        (".weight_scale", "F8_E4M3", "[o, i // 16]"),
        (".weight_scale_2", "F32", "[]"),
        (".input_scale", "F32", "[]"),
    ],
    # DeepSeek-V4 native: FP8 E4M3 weight + E8M0 128x128 block scale named `scale`
    "dsv4_fp8": [
        (".weight", "F8_E4M3", "[o, i]"),
        (".scale", "F8_E8M0", "[cdiv(o, 128), cdiv(i, 128)]"),
    ],
    # DeepSeek-V4 native FP4 experts: packed pairs as I8, E8M0 scale per 32
    "dsv4_fp4": [
        (".weight", "I8", "[o, i // 2]"),
        (".scale", "F8_E8M0", "[o, i // 32]"),
    ],
    # compressed-tensors (llm-compressor), BF16 models: scales in the model dtype
    # (compressed-tensors quantization/lifecycle/initialize.py initialize_qparams);
    # float-quantized FP8 per channel: weight + weight_scale [out, 1]
    "ct_fp8_channel": [
        (".weight", "F8_E4M3", "[o, i]"),
        (".weight_scale", "BF16", "[o, 1]"),
    ],
    # the same with F32 scales, as exports that keep their observers' dtype store them
    "ct_fp8_channel_f32": [
        (".weight", "F8_E4M3", "[o, i]"),
        (".weight_scale", "F32", "[o, 1]"),
    ],
    # pack-quantized INT4 (compressors/pack_quantized/base.py): eight values per I32 word,
    # a scale per group, the logical shape as I64 [2]
    "ct_int4_g32": [
        (".weight_packed", "I32", "[o, i // 8]"),
        (".weight_scale", "BF16", "[o, i // 32]"),
        (".weight_shape", "I64", "[2]"),
    ],
    "ct_int4_g128": [
        (".weight_packed", "I32", "[o, i // 8]"),
        (".weight_scale", "BF16", "[o, i // 128]"),
        (".weight_shape", "I64", "[2]"),
    ],
    # nvfp4-pack-quantized (compressors/nvfp4/base.py): packed pairs, E4M3 scale per 16,
    # F32 weight_global_scale and input_global_scale [1]
    "ct_nvfp4": [
        (".weight_packed", "U8", "[o, i // 2]"),
        (".weight_scale", "F8_E4M3", "[o, i // 16]"),
        (".weight_global_scale", "F32", "[1]"),
        (".input_global_scale", "F32", "[1]"),
    ],
}


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.shape)


def load_case(name: str) -> dict[str, Any]:
    """A case file by stem, e.g. ``load_case("deepseek-r1-0528")``.

    ``extends: other`` starts from that case's tensors, dims, index and tiny block: the
    case's own keys replace them (``extra_tensors`` / ``extra_dims`` add to them), its ``config`` / ``tiny`` are merged in (``config_drop``
    removes keys of the base's config first, e.g. its ``quantization_config``), and ``schemes`` (``{role: scheme}`` or ``{role: {main: .., mtp: ..}}``)
    re-encodes the generators that carry that ``role``.
    """
    with open(CASES / f"{name}.yaml") as fh:
        case: dict[str, Any] = yaml.safe_load(fh)
    base_name = case.get("extends")
    if not base_name:
        return case
    base = load_case(base_name)
    out = {k: v for k, v in base.items() if k not in ("sources", "expect", "xfail", "case")}
    out["config"] = {
        k: v for k, v in (out.get("config") or {}).items() if k not in (case.get("config_drop") or ())
    }
    for key, value in case.items():
        if key in ("config", "tiny") and isinstance(value, dict):
            out[key] = _merge(out.get(key) or {}, value)
        else:
            out[key] = value
    out["tensors"] = list(out["tensors"]) + list(case.get("extra_tensors") or [])
    out["dims"] = {**(out.get("dims") or {}), **(case.get("extra_dims") or {})}
    return out


def case_names() -> list[str]:
    return sorted(p.stem for p in CASES.glob("*.yaml"))


def _lookup(config: dict, path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def dims_of(case: dict, config: dict) -> dict[str, Any]:
    """Symbols of the case: ``{sym: config path | number | expression over earlier dims}``."""
    env: dict[str, Any] = {}
    for sym, spec in (case.get("dims") or {}).items():
        if isinstance(spec, str) and not any(c in spec for c in " +-*/()%"):
            value = _lookup(config, spec)
            if value is None:
                raise KeyError(f"dim {sym}: config has no {spec!r}")
        elif isinstance(spec, str):
            flat = {k: v for k, v in config.items() if isinstance(v, int | float)}
            flat.update(
                (k, v)
                for k, v in (config.get("text_config") or {}).items()
                if isinstance(v, int | float)
            )
            value = _eval(spec, {**flat, **env})
        else:
            value = spec
        env[sym] = value
    return env


def _eval(expr: Any, env: dict[str, Any]) -> Any:
    if not isinstance(expr, str):
        return expr
    scope = {
        "cdiv": lambda a, b: -(-a // b),
        "ceil": math.ceil,
        "min": min,
        "max": max,
        "range": range,
        "int": int,
    }
    return eval(expr, {"__builtins__": {}, **scope, **env})


def _values(spec: Any, env: dict[str, Any]) -> list[Any]:
    if isinstance(spec, list):  # an "=expr" element stands for the list it evaluates to
        out: list[Any] = []
        for v in spec:
            if isinstance(v, str) and v[:1] == "=":
                value = _eval(v[1:], env)
                out.extend(value if isinstance(value, list) else [value])
            else:
                out.append(v)
        return out
    if isinstance(spec, int):
        return [spec]
    lo, _, hi = str(spec).partition("..")
    if not _:
        return [_eval(lo, env)]
    return list(range(int(_eval(lo, env)), int(_eval(hi, env)) + 1))


def _bindings(gen: dict, env: dict[str, Any]) -> Iterator[dict[str, Any]]:
    loops = gen.get("for") or {}
    keys = list(loops)
    for combo in itertools.product(*(_values(loops[k], env) for k in keys)):
        b = dict(zip(keys, combo, strict=True))
        if "where" in gen and not _eval(gen["where"], {**env, **b}):
            continue
        yield b


def _fmt(pattern: str, b: dict[str, Any]) -> str:
    return pattern.format(**b)


def expand(case: dict, config: dict) -> list[Tensor]:
    """Every tensor of the case for this config, in generator order."""
    env = dims_of(case, config)
    out: list[Tensor] = []
    root = case.get("root")  # the block prefix of layer l, e.g. MTP blocks under another name
    for gen in case["tensors"]:
        for b in _bindings(gen, env):
            if root and "l" in b:
                b = {**b, "root": _eval(root, {**env, **b})}
            scope = {**env, **b}
            shape = [int(_eval(s, scope)) for s in gen["s"]]
            name = _fmt(gen["n"], b)
            scheme = _scheme(case, gen, b, env)
            if scheme:
                o, i = shape
                for suffix, dtype, shp in SCHEMES[scheme]:
                    dims = _eval(shp, {"o": o, "i": i})
                    out.append(Tensor(name + suffix, dtype, tuple(int(d) for d in dims)))
            else:
                out.append(Tensor(name, gen["d"], tuple(shape)))
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"case {case.get('case')}: tensor {dup} generated twice")
    return out


def _scheme(case: dict, gen: dict, b: dict[str, Any], env: dict[str, Any]) -> str | None:
    """The storage scheme of a generator's module: ``schemes[role]`` (main / MTP) or ``q``."""
    pick = (case.get("schemes") or {}).get(gen.get("role"), gen.get("q"))
    if isinstance(pick, dict):
        # MTP: layer l past the decoder's N, or the loop variable k (an MTP block's index)
        is_mtp = ("l" in b and "N" in env and b["l"] >= env["N"]) or ("k" in b and "l" not in b)
        return pick["mtp" if is_mtp else "main"]
    return pick


def _expand_names(node: Any, env: dict[str, Any]) -> Any:
    if isinstance(node, dict) and set(node) == {"$expr"}:
        return _eval(node["$expr"], env)
    if isinstance(node, dict) and set(node) == {"$names"}:
        gens = node["$names"]
        gens = gens if isinstance(gens, list) else [gens]
        return [_fmt(g["n"], b) for g in gens for b in _bindings(g, env)]
    if isinstance(node, dict):
        return {k: _expand_names(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_names(v, env) for v in node]
    return node


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if (
            isinstance(v, dict)
            and isinstance(out.get(k), dict)
            and not {"$names", "$expr"} & set(v)
        ):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def twin_files(case: dict, size: str) -> tuple[dict, dict[str, dict], list[Tensor], int]:
    """(config.json, side files, tensors, shard count) of the ``full`` or ``tiny`` twin."""
    config = case["config"]
    files = case.get("files") or {}
    shards = case["index"]["shards"]
    if size == "tiny":
        tiny = case.get("tiny") or {}
        config = _merge(config, tiny.get("config") or {})
        files = _merge(files, tiny.get("files") or {})
        shards = tiny.get("shards", 3)
    env = dims_of(case, config)
    config = _expand_names(config, env)
    files = {k: _expand_names(v, env) for k, v in files.items()}
    return config, files, expand(case, config), shards


def _split(tensors: list[Tensor], count: int) -> list[list[Tensor]]:
    total = sum(t.nbytes for t in tensors) or 1
    count = max(1, min(count, len(tensors)))
    groups: list[list[Tensor]] = [[] for _ in range(count)]
    offset = 0
    for t in tensors:
        groups[min(count - 1, offset * count // total)].append(t)
        offset += t.nbytes
    return [g for g in groups if g]


def write_twin(case: dict, size: str, dst: Path, seed: int = 0) -> Path:
    """Write the ``full`` (sparse) or ``tiny`` (real data) twin of ``case`` into ``dst``."""
    config, files, tensors, shards = twin_files(case, size)
    dst.mkdir(parents=True, exist_ok=True)
    groups = _split(tensors, shards)
    digits = case["index"].get("digits", 5)
    pattern = case["index"].get("name", "model-{k:05d}-of-{n:0{digits}d}.safetensors")
    weight_map: dict[str, str] = {}
    for k, group in enumerate(groups, start=1):
        fname = pattern.format(k=k, n=len(groups), digits=digits)
        ordered = sorted(group, key=lambda t: t.name)
        prefix, offsets = build_header(
            [(t.name, t.dtype, t.shape) for t in ordered], {"format": "pt"}
        )
        with open(dst / fname, "wb") as fh:
            fh.write(prefix)
            if size == "full":
                fh.truncate(len(prefix) + (offsets[-1][1] if offsets else 0))
            else:
                for t in ordered:
                    fh.write(tensor_data(t, seed))
        for t in group:
            weight_map[t.name] = fname
    index = {
        "metadata": {"total_size": sum(t.nbytes for t in tensors)},
        "weight_map": dict(sorted(weight_map.items())),
    }
    (dst / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for fname, content in files.items():
        (dst / fname).write_text(json.dumps(content, indent=2) + "\n")
    return dst


_SCALE_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".scale", "_scales")  # gpt-oss _scales
#: per-matrix global and activation scales (ModelOpt, compressed-tensors NVFP4)
_GLOBAL_SUFFIXES = ("_scale_2", ".input_scale", "_global_scale")


def tensor_data(t: Tensor, seed: int = 0) -> bytes:
    """Deterministic valid bytes of one tensor: FP8 codes but NaN, any FP4 nibble, E8M0
    scales 2**-9..2**-3, positive float scales, N(0, 0.02) floats (norms around 1)."""
    key = t.name
    if t.name.endswith(_GLOBAL_SUFFIXES):  # fused gate|up share one global scale
        key = key.replace("up_proj", "gate_proj")
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    n = math.prod(t.shape)
    is_scale = t.name.endswith(_SCALE_SUFFIXES)
    if t.dtype == "F8_E4M3":
        if is_scale:  # positive normal E4M3 scales 2**-4 .. 1.0
            return rng.integers(0x18, 0x39, n, dtype=np.uint8).tobytes()
        mag = rng.integers(0, 0x7F, n, dtype=np.uint8)
        return (mag | (rng.integers(0, 2, n, dtype=np.uint8) << 7)).tobytes()
    if t.dtype in ("U8", "I8", "F8_E8M0"):
        if is_scale or t.dtype == "F8_E8M0":
            return rng.integers(118, 125, n, dtype=np.uint8).tobytes()
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if t.dtype == "F32" and (is_scale or t.name.endswith(_GLOBAL_SUFFIXES)):
        return ((0.5 + rng.random(n)) * (0.02 / 448.0)).astype(np.float32).tobytes()
    if t.dtype == "BF16" and is_scale:  # compressed-tensors' float scales: positive
        x = ((0.5 + rng.random(n)) * (0.02 / 4.0)).astype(np.float32)
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if t.name.endswith(".weight_shape"):  # compressed-tensors: never read by vLLM's MoE path
        return np.zeros(n, np.int64).tobytes()
    if t.dtype in ("I64", "I32"):
        return rng.integers(0, 2, n).astype(np.int64 if t.dtype == "I64" else np.int32).tobytes()
    x = rng.standard_normal(n).astype(np.float32)
    module = t.name.rsplit(".", 1)[0] if "." in t.name else t.name
    x = 1.0 + 0.05 * x if "norm" in module.rsplit(".", 1)[-1] else 0.02 * x
    if t.dtype == "F32":
        return x.astype(np.float32).tobytes()
    if t.dtype == "F16":
        return x.astype(np.float16).tobytes()
    if t.dtype == "BF16":
        bits = x.astype(np.float32).view(np.uint32)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        return (bits >> 16).astype(np.uint16).tobytes()
    raise ValueError(f"{t.name}: no data generator for dtype {t.dtype}")


def sparse_size(path: Path) -> int:
    """Bytes a twin really occupies on disk (holes excluded)."""
    return sum(os.stat(p).st_blocks * 512 for p in path.iterdir())

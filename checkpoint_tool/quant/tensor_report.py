"""One tensor, explained: header facts, its scheme and rule, and stats of its decoded values.

Backs ``ckpt tensor``. Reads only the tensor and its scale siblings, by byte range. Weights are
dequantized through the codecs, in row chunks, so the float32 copy never has to fit in memory
at once; ``write_npy`` streams it into a ``.npy`` file (numpy format, no pickle).

Example::

    rep = tensor_report(cat, "model.layers.1.mlp.experts.0.down_proj.weight")
    rep.scheme.short, rep.values.absmax, rep.scales[0].e8m0_nan
    # ('mxfp4/32', 5.25, 0)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.reader import read_tensor
from checkpoint_tool.errors import InputError, OutputError
from checkpoint_tool.formats import format_of
from checkpoint_tool.model.families import loads_fused_experts
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0
from checkpoint_tool.quant.codecs.fp8 import decode_fp8_e4m3
from checkpoint_tool.quant.configs.names import non_linear_reason, tensor_name
from checkpoint_tool.quant.configs.shapes import expected_siblings, logical_shape
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import FUSED_EXPERT_SUFFIXES, ResolvedCatalog, resolve_catalog
from checkpoint_tool.quant.roles import SCALE_ROLES
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue

#: float32 elements decoded per chunk (64 MiB)
CHUNK_ELEMS = 16 * 1024 * 1024


class ValueStats(BaseModel):
    """Stats over decoded float values; min/max/mean/absmax over the finite ones."""

    count: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    absmax: float | None = None
    nan: int = 0
    inf: int = 0


class ScaleStats(BaseModel):
    """A scale sibling: header facts and what can be wrong with it."""

    name: str
    role: str
    dtype: str
    shape: list[int]
    encoding: str  # "e8m0" | "e4m3" | "float"
    values: ValueStats
    e8m0_nan: int = 0  # bytes equal to 255 (E8M0 NaN)
    non_finite: int = 0
    non_positive: int = 0


class SchemeFacts(BaseModel):
    short: str
    format: str
    rule: str
    source: str
    block: list[int] | None = None
    group_size: int | None = None
    scale_suffix: str | None = None
    activation: str | None = None
    producer_rule: str | None = None  # set when the producer resolved it differently


class TensorReport(BaseModel):
    """What ``ckpt tensor`` prints."""

    name: str
    file: str
    dtype: str
    shape: list[int]
    byte_range: list[int]
    nbytes: int
    module: str
    role: str
    scheme: SchemeFacts
    logical_shape: list[int]
    decoded: str  # "dequantized" | "as stored" | "scale values"
    values: ValueStats
    scales: list[ScaleStats] = []
    issues: list[Issue] = []
    out: str | None = None


def _facts(scheme: Scheme, producer: Scheme | None) -> SchemeFacts:
    differs = producer is not None and producer.producer_identity() != scheme.producer_identity()
    return SchemeFacts(
        short=scheme.short(),
        format=scheme.format.value,
        rule=scheme.rule,
        source=scheme.source,
        block=list(scheme.block) if scheme.block else None,
        group_size=scheme.group_size,
        scale_suffix=scheme.scale_suffix,
        activation=scheme.activation,
        producer_rule=f"{producer.short()} by {producer.rule}" if differs and producer else None,
    )


class _Accumulator:
    def __init__(self) -> None:
        self.count = self.nan = self.inf = self.finite = 0
        self.total = 0.0
        self.lo = float("inf")
        self.hi = float("-inf")

    def add(self, x: torch.Tensor) -> None:
        x = x.reshape(-1).to(torch.float32)
        self.count += x.numel()
        nan = torch.isnan(x)
        inf = torch.isinf(x)
        self.nan += int(nan.sum())
        self.inf += int(inf.sum())
        fin = x[~(nan | inf)]
        if fin.numel():
            self.finite += fin.numel()
            self.total += float(fin.to(torch.float64).sum())
            self.lo = min(self.lo, float(fin.min()))
            self.hi = max(self.hi, float(fin.max()))

    def stats(self) -> ValueStats:
        if not self.finite:
            return ValueStats(count=self.count, nan=self.nan, inf=self.inf)
        return ValueStats(
            count=self.count,
            min=self.lo,
            max=self.hi,
            mean=self.total / self.finite,
            absmax=max(abs(self.lo), abs(self.hi)),
            nan=self.nan,
            inf=self.inf,
        )


def _scale_encoding(scheme: Scheme, role: str, t: torch.Tensor) -> str:
    if t.dtype == torch.float8_e4m3fn:
        return "e4m3"
    if t.dtype in (torch.uint8, torch.int8):
        return format_of(scheme).byte_scale_encoding(role)
    return "float"


#: scale encoding -> its decoder to float32
_SCALE_DECODERS = {
    "e8m0": decode_e8m0,
    "e4m3": decode_fp8_e4m3,
    "float": lambda t: t.to(torch.float32),
}


def scale_values(
    name: str, role: str, dtype: str, scheme: Scheme, t: torch.Tensor
) -> tuple[ScaleStats, torch.Tensor]:
    """Decode a scale tensor, count the values that cannot be right; the stats and values."""
    enc = _scale_encoding(scheme, role, t)
    values = _SCALE_DECODERS[enc](t)
    acc = _Accumulator()
    acc.add(values)
    stats = acc.stats()
    return ScaleStats(
        name=name,
        role=role,
        dtype=dtype,
        shape=list(t.shape),
        encoding=enc,
        values=stats,
        e8m0_nan=int((t.view(torch.uint8) == 255).sum()) if enc == "e8m0" else 0,
        non_finite=stats.nan + stats.inf,
        non_positive=int((values <= 0).sum()),
    ), values


def _parts(cat: Catalog, rc: ResolvedCatalog, weight: str) -> tuple[dict, dict]:
    """Storage tensors by codec role for a quantized weight, and suffix -> (name, role, dtype)."""
    t = rc.tensors[weight]
    entry = cat.tensors[weight]
    scheme = t.scheme
    parts: dict[str, torch.Tensor] = {"weight": read_tensor(cat, entry)}
    found: dict[str, tuple[str, str, str]] = {}
    for suffix, exp in expected_siblings(scheme, entry.dtype, entry.shape).items():
        name = tensor_name(t.module, suffix)
        sib = cat.tensors.get(name)
        if sib is None:
            raise InputError(
                f"{cat.path_of(entry)}: tensor {weight!r}: its {exp.role} {name!r} is missing "
                f"but {scheme.short()} ({scheme.rule}) needs it; the checkpoint is incomplete"
            )
        if tuple(sib.shape) not in exp.shapes:
            raise InputError(
                f"{cat.path_of(sib)}: tensor {name!r}: shape {list(sib.shape)} does not fit "
                f"{scheme.short()} for weight {list(entry.shape)} (needs "
                f"{list(exp.shapes[0])}); the scale does not belong to this weight"
            )
        found[suffix] = (name, exp.role, sib.dtype)
        if exp.role in ("scale", "global_scale"):
            parts[exp.role] = read_tensor(cat, sib)
    return parts, found


def _codec(scheme: Scheme, found: dict):
    scale_dtype = next((d for _, role, d in found.values() if role == "scale"), None)
    return codec_for_format(
        scheme.format,
        block=scheme.block,
        group_size=scheme.group_size,
        scale_dtype=scale_dtype,
        scale_is_e8m0=scheme.scale_is_e8m0,
    )


def _chunks(parts: dict[str, torch.Tensor], codec, logical: tuple[int, ...]) -> Iterator:
    """Yield (index, float32 chunk) over rows of every 2-D slice of the weight."""
    if len(logical) > 2:
        for i in range(logical[0]):
            sub = {k: (v[i] if v.dim() > 0 else v) for k, v in parts.items()}
            for j, chunk in _chunks(sub, codec, logical[1:]):
                yield (i, *j), chunk
        return
    rows, cols = logical
    align = codec.alignment(-2, logical) if rows else 1
    step = max(align, (CHUNK_ELEMS // max(cols, 1)) // align * align)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        piece = parts if (start, stop) == (0, rows) else codec.slice(parts, -2, start, stop)
        yield (slice(start, stop),), codec.dequantize(piece)


def tensor_report(
    cat: Catalog, name: str, *, out: Path | None = None, rc: ResolvedCatalog | None = None
) -> TensorReport:
    """Explain ``name`` (a tensor, or a module whose ``.weight`` exists); write ``out`` .npy."""
    if name not in cat.tensors and f"{name}.weight" in cat.tensors:
        name = f"{name}.weight"
    entry = cat.get(name)
    rc = rc or resolve_catalog(cat)
    t = rc.tensors[name]
    scheme = t.scheme
    producer = None
    if t.role == "weight" and non_linear_reason(t.module) is None:
        if not t.module.endswith(FUSED_EXPERT_SUFFIXES) and scheme.source != "none":
            producer = rc.qconfig.producer_scheme_for(t.module)
    related = {name} | {n for n, r in rc.tensors.items() if r.module == t.module}
    native = loads_fused_experts(cat.config)
    issues = [i for i in catalog_findings(cat, rc, fused_native=native) if i.tensor in related]
    writer = _NpyWriter(out) if out else None
    try:
        acc, scales, logical, decoded = _decode(cat, rc, name, writer)
    except BaseException:
        if writer:
            writer.abort()
        raise
    if writer:
        writer.close()
    return TensorReport(
        name=name,
        file=entry.file,
        dtype=entry.dtype,
        shape=list(entry.shape),
        byte_range=[entry.begin, entry.end],
        nbytes=entry.nbytes,
        module=t.module,
        role=t.role,
        scheme=_facts(scheme, producer),
        logical_shape=list(logical),
        decoded=decoded,
        values=acc.stats(),
        scales=scales,
        issues=issues,
        out=str(out) if out else None,
    )


def _decode(
    cat: Catalog, rc: ResolvedCatalog, name: str, writer: _NpyWriter | None
) -> tuple[_Accumulator, list[ScaleStats], tuple[int, ...], str]:
    """Decode ``name`` chunk by chunk into stats (and ``writer``); return what was seen."""
    entry = cat.tensors[name]
    t = rc.tensors[name]
    scheme = t.scheme
    acc = _Accumulator()
    scales: list[ScaleStats] = []
    if t.role == "weight" and scheme.quantized:
        if not format_of(scheme).decodable:
            raise InputError(
                f"{cat.path_of(entry)}: tensor {name!r}: {scheme.rule}; ckpt cannot decode it"
            )
        parts, found = _parts(cat, rc, name)
        for sname, role, dtype in found.values():
            st = read_tensor(cat, sname) if role == "input_scale" else parts[role]
            scales.append(scale_values(sname, role, dtype, scheme, st)[0])
        codec = _codec(scheme, found)
        logical = logical_shape(scheme, entry.dtype, entry.shape)
        if writer:
            writer.open(logical)
        for index, chunk in _chunks(parts, codec, logical):
            acc.add(chunk)
            if writer:
                writer.put(index, chunk)
        decoded = "dequantized"
    else:
        raw = read_tensor(cat, entry)
        logical = tuple(entry.shape)
        if t.role in SCALE_ROLES:
            st, values = scale_values(name, t.role, entry.dtype, scheme, raw)
            scales.append(st)
            decoded = "scale values"
        elif raw.dtype.is_floating_point or raw.dtype == torch.float8_e4m3fn:
            values = raw.to(torch.float32)
            decoded = "as stored"
        else:
            values = raw.to(torch.float32)
            decoded = "as stored (integer)"
        acc.add(values)
        if writer:
            writer.open(tuple(values.shape))
            writer.put((), values)
    return acc, scales, logical, decoded


class _NpyWriter:
    """Stream a float32 array into ``path`` (.npy, no pickle) via a memory map; atomic rename."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.partial")
        self.arr: np.memmap | None = None

    def open(self, shape: tuple[int, ...]) -> None:
        try:
            self.arr = np.lib.format.open_memmap(
                self.tmp, mode="w+", dtype=np.float32, shape=tuple(shape)
            )
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot write ({exc.strerror})") from exc

    def put(self, index: tuple, chunk: torch.Tensor) -> None:
        assert self.arr is not None
        self.arr[index] = chunk.numpy()

    def abort(self) -> None:
        self.arr = None
        if self.tmp.exists():
            self.tmp.unlink()

    def close(self) -> None:
        if self.arr is None:
            return
        self.arr.flush()
        del self.arr
        self.arr = None
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot finalize ({exc.strerror})") from exc

"""Value rules: scales decode to finite positive numbers; optionally, weights hold no NaN codes.

Only the bytes of the tensors checked are read, by byte range and in bounded chunks
(``ValidateOptions.chunk_bytes``), so memory stays flat whatever the tensor size. The scan is
exact (every element is counted) and bounded by the bytes that hold data: the holes of a
sparse file are counted as the zeros they read as without being read, and a clean chunk costs
one vectorised pass (a byte search, or a min/max), so the scan runs at read speed.

- E8M0 scales (``U8`` / ``F8_E8M0``): byte 255 is NaN.
- Float scales (``F32``/``BF16``/``F16``/``F8_E4M3``): NaN/inf and negative values are errors;
  zero is a warning (a zero block/group scale decodes its whole block to 0: legal for an
  all-zero block, suspicious otherwise).
- ``--scan-weights``: FP8 weights with NaN codes (0x7F / 0xFF), float weights with NaN/inf.

Example finding::

    Issue(severity="error", rule="scale_values", file="model-00001-of-00002.safetensors",
          tensor="model.layers.1.mlp.experts.2.down_proj.weight_scale",
          message="1 of 1024 E8M0 scale bytes is 255 (NaN), first at [3, 1]; ...")
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from checkpoint_tool.catalog.catalog import Catalog, TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_shape
from checkpoint_tool.catalog.sparse import read_runs
from checkpoint_tool.quant.roles import SCALE_ROLES
from checkpoint_tool.report import Issue, Severity
from checkpoint_tool.validate.context import Unavailable, ValidationContext

E8M0_DTYPES = ("U8", "F8_E8M0")
#: float storage dtypes decoded by value (numpy / ml_dtypes, little-endian)
NUMPY_FLOAT: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
}
FLOAT_DTYPES = tuple(NUMPY_FLOAT)
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")


@dataclass
class ValueStats:
    """Counts of bad elements in one tensor; ``first`` is the flat index of the first one."""

    total: int = 0
    nan: int = 0
    inf: int = 0
    negative: int = 0
    zero: int = 0
    #: flat index of the first NaN/inf (or NaN code) element
    first_bad: int | None = None
    first_negative: int | None = None
    first_zero: int | None = None

    def note(self, field: str, mask: np.ndarray) -> int:
        """Count ``mask``; record the first flat index where it holds (offset by the elements
        seen so far) in ``field`` if none is recorded yet."""
        hits = np.flatnonzero(mask)
        if hits.size and getattr(self, field) is None:
            setattr(self, field, self.total + int(hits[0]))
        return int(hits.size)


def iter_chunks(
    catalog: Catalog, entry: TensorEntry, elem_bytes: int, chunk_bytes: int
) -> Iterator[bytes | memoryview | int]:
    """Yield the tensor's bytes in element-aligned chunks of at most ``chunk_bytes`` (from disk,
    into one reused buffer, or from the server for a remote source). An ``int`` is a run of
    that many zero bytes a local sparse file stores as a hole: not read, since a hole reads as
    zeros (``catalog.sparse.read_runs``); the counts come out the same as reading it."""
    step = max(elem_bytes, chunk_bytes - chunk_bytes % elem_bytes)
    if catalog.store is None:
        yield from read_runs(catalog.path_of(entry), entry.begin, entry.end, elem_bytes, step)
        return
    pos = entry.begin
    while pos < entry.end:
        stop = min(entry.end, pos + step)
        yield catalog.read_bytes(entry.file, pos, stop)
        pos = stop


def scan_values(
    ctx: ValidationContext, entry: TensorEntry, *, e8m0: bool, positive: bool = True
) -> ValueStats:
    """Stream one tensor and count NaN/inf/negative/zero elements (E8M0: bytes equal to 255).

    Chunks with nothing to report (all finite, and all positive when ``positive``: the
    common case) cost one vectorised pass (E8M0: the largest byte below 255; FP8 E4M3: the byte
    range 0x01..0x7E, positive and finite, checked by min/max); ``positive=False`` (weights)
    counts only NaN/inf. Holes of a sparse file count as zeros without being read.
    """
    catalog = ctx.catalog
    stats = ValueStats()
    if e8m0:
        for raw in iter_chunks(catalog, entry, 1, ctx.options.chunk_bytes):
            if isinstance(raw, int):  # zero bytes: 2^-127, not NaN
                stats.total += raw
                continue
            a = np.frombuffer(raw, dtype=np.uint8)
            if a.size and a.max() == 255:
                stats.nan += stats.note("first_bad", a == 255)
            stats.total += a.size
        return stats
    dtype = NUMPY_FLOAT[entry.dtype]
    for raw in iter_chunks(catalog, entry, dtype.itemsize, ctx.options.chunk_bytes):
        if isinstance(raw, int):  # zero elements: finite, and zero when ``positive``
            n = raw // dtype.itemsize
            if positive and n:
                if stats.first_zero is None:
                    stats.first_zero = stats.total
                stats.zero += n
            stats.total += n
            continue
        if positive and entry.dtype == "F8_E4M3" and raw:
            codes = np.frombuffer(raw, dtype=np.uint8)
            if codes.min() >= 0x01 and codes.max() <= 0x7E:  # every value finite and > 0
                stats.total += codes.size
                continue
        x = np.frombuffer(raw, dtype=dtype).astype(np.float32)
        clean = ((x > 0) & (x < np.inf)).all() if positive else np.isfinite(x).all()
        if not clean:
            finite = np.isfinite(x)
            stats.note("first_bad", ~finite)
            stats.nan += int(np.isnan(x).sum())
            stats.inf += int(np.isinf(x).sum())
            if positive:
                stats.negative += stats.note("first_negative", (x < 0) & finite)
                stats.zero += stats.note("first_zero", x == 0)
        stats.total += x.size
    return stats


def scan_fp8_nan_codes(ctx: ValidationContext, entry: TensorEntry) -> ValueStats:
    """Count FP8 NaN codes (E4M3: 0x7F/0xFF; E5M2: exponent all ones) in bounded chunks."""
    catalog = ctx.catalog
    stats = ValueStats()
    for raw in iter_chunks(catalog, entry, 1, ctx.options.chunk_bytes):
        if isinstance(raw, int):  # zero bytes: +0, no NaN code
            stats.total += raw
            continue
        a = np.frombuffer(raw, dtype=np.uint8)
        if entry.dtype == "F8_E4M3":
            stats.nan += stats.note("first_bad", (a & 0x7F) == 0x7F)
        else:  # E5M2: exponent 0b11111 is inf (mantissa 0) or NaN
            stats.nan += stats.note("first_bad", (a & 0x7C) == 0x7C)
        stats.total += a.size
    return stats


def where(entry: TensorEntry, flat: int | None) -> str:
    """``[3, 1]``: the storage index of flat element ``flat`` (``[]`` for a 0-d tensor)."""
    if flat is None:
        return "?"
    shape = storage_shape(entry.dtype, entry.shape, name=entry.name)
    if not shape:
        return "[]"
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def is_scale_name(name: str) -> bool:
    """Name-based scale test, for layouts the quant config cannot resolve: the last component
    ends with ``scale``, ``scale_inv`` or ``scale_2`` (``weight_scale``, ``w13_weight_scale``,
    ``w2_input_scale_2``, ``_k_scale``, DeepSeek-V4 ``scale``)."""
    return name.rsplit(".", 1)[-1].endswith(("scale", "scale_inv", "scale_2"))


def scale_entries(ctx: ValidationContext) -> list[TensorEntry]:
    """The scale tensors: by resolved role; by name for vLLM sharded-state output (engine
    parameter names) or when the quant config cannot be resolved."""
    names: list[str]
    if ctx.is_sharded_state:
        names = [n for n in ctx.catalog.tensors if is_scale_name(n)]
    else:
        try:
            resolved = ctx.resolved()
            names = [n for n, r in resolved.tensors.items() if r.role in SCALE_ROLES]
        except Unavailable:
            names = [n for n in ctx.catalog.tensors if is_scale_name(n)]
    return [
        ctx.catalog.tensors[n]
        for n in sorted(names)
        if n in ctx.catalog.tensors and n not in ctx.unreadable
    ]


def check_scale_values(ctx: ValidationContext) -> list[Issue]:
    """Scales are finite and positive; no E8M0 255 (NaN)."""
    out: list[Issue] = []
    for entry in scale_entries(ctx):
        if entry.dtype in E8M0_DTYPES:
            s = scan_values(ctx, entry, e8m0=True)
            if s.nan:
                out.append(
                    _issue(
                        "error",
                        "scale_values",
                        entry,
                        f"{s.nan} of {s.total} E8M0 scale bytes are 255 (NaN), first at "
                        f"{where(entry, s.first_bad)}; the block decodes to NaN: re-quantize it",
                    )
                )
        elif entry.dtype in FLOAT_DTYPES:
            out.extend(_float_scale_findings(ctx, entry))
        else:
            out.append(
                _issue(
                    "error",
                    "scale_values",
                    entry,
                    f"scale stored as {entry.dtype}, which is neither E8M0 nor a float type",
                )
            )
    return out


def _float_scale_findings(ctx: ValidationContext, entry: TensorEntry) -> list[Issue]:
    s = scan_values(ctx, entry, e8m0=False)
    out = []
    if s.nan or s.inf or s.negative:
        counts = ((s.nan, "NaN"), (s.inf, "inf"), (s.negative, "negative"))
        parts = ", ".join(f"{n} {what}" for n, what in counts if n)
        first = s.first_bad if s.first_bad is not None else s.first_negative
        out.append(
            _issue(
                "error",
                "scale_values",
                entry,
                f"{parts} of {s.total} {entry.dtype} scale values, first at "
                f"{where(entry, first)}; scales must be finite and positive: re-quantize",
            )
        )
    if s.zero:
        out.append(
            _issue(
                "warning",
                "scale_values",
                entry,
                f"{s.zero} of {s.total} scale values are 0, first at {where(entry, s.first_zero)}"
                "; those blocks decode to zeros (fine only for all-zero blocks)",
            )
        )
    return out


def check_weight_values(ctx: ValidationContext) -> list[Issue]:
    """With --scan-weights: FP8 weights hold no NaN codes, float weights no NaN/inf."""
    if not ctx.options.scan_weights:
        raise Unavailable("weights are not scanned by default; pass --scan-weights")
    scale_names = {e.name for e in scale_entries(ctx)}
    out: list[Issue] = []
    for name, entry in ctx.catalog.tensors.items():
        if name in scale_names or name in ctx.unreadable or not entry.nbytes:
            continue
        if is_scale_name(name):
            continue
        if entry.dtype in FP8_DTYPES:
            s = scan_fp8_nan_codes(ctx, entry)
            if s.nan:
                out.append(
                    _issue(
                        "error",
                        "weight_values",
                        entry,
                        f"{s.nan} of {s.total} {entry.dtype} weight bytes are NaN codes, first "
                        f"at {where(entry, s.first_bad)}; re-quantize the weight",
                    )
                )
        elif entry.dtype in ("F32", "BF16", "F16", "F64"):  # weights: only NaN/inf matter
            s = scan_values(ctx, entry, e8m0=False, positive=False)
            if s.nan or s.inf:
                out.append(
                    _issue(
                        "error",
                        "weight_values",
                        entry,
                        f"{s.nan} NaN and {s.inf} inf of {s.total} {entry.dtype} values, first "
                        f"at {where(entry, s.first_bad)}; the weight is corrupt",
                    )
                )
    return out


def _issue(severity: Severity, rule: str, entry: TensorEntry, message: str) -> Issue:
    return Issue(severity=severity, rule=rule, file=entry.file, tensor=entry.name, message=message)

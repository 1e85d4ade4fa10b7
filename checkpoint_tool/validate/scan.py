"""Scan one safetensors file without trusting it: every fault becomes a finding, never an abort.

``checkpoint_tool.catalog.safetensors_format.read_header`` is strict (it raises on the first
fault). A validator must go on: report *which* fault, keep the tensors it can still describe
(so completeness does not cry "missing" for a tensor that is merely unreadable), and mark the
tensors whose bytes cannot be trusted. ``scan_file`` asks ``read_header`` first; when it
refuses the file, a lenient parse classifies each fault under a structure rule.

Rules produced here: ``shard_truncated`` (the file ends before its header or data does),
``header_valid`` (header not JSON / malformed entries / overlapping ranges),
``offsets_in_range`` (one tensor's offsets point past the end while the rest is consistent),
``tensor_duplicate`` (the same name twice inside one header).

Example::

    scan = scan_file(root, "model-00002-of-00002.safetensors")
    scan.problems  # [Issue(rule="shard_truncated", message="file is truncated: ...")]
    scan.unreadable  # {"model.layers.1.mlp.experts.3.down_proj.weight", ...}
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from checkpoint_tool.catalog.json_input import short_repr
from checkpoint_tool.catalog.safetensors_format import (
    DTYPE_BITS,
    MAX_DIM,
    MAX_HEADER_BYTES,
    TensorHeader,
    read_header,
    tensor_nbytes,
)
from checkpoint_tool.errors import InputError
from checkpoint_tool.report import Issue


@dataclass
class FileScan:
    """What one shard's header says, and what is wrong with it.

    ``entries`` holds every well-formed header entry (absolute offsets); ``broken`` the names
    whose entry is malformed (present, but dtype/shape unknown); ``unreadable`` the names whose
    bytes must not be read (past the end, overlapping, or the whole header is suspect).
    """

    rel: str
    size: int = 0
    header_len: int = 0
    entries: dict[str, TensorHeader] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)
    problems: list[Issue] = field(default_factory=list)
    #: False when the header could not be parsed at all (its tensor names are unknown)
    parsed: bool = False

    @cached_property
    def names(self) -> frozenset[str]:
        """Every tensor name of the header (read after the scan is complete)."""
        return frozenset(self.entries) | frozenset(self.broken)

    @property
    def tensor_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def problem(self, rule: str, message: str, tensor: str | None = None) -> None:
        self.problems.append(
            Issue(severity="error", rule=rule, file=self.rel, tensor=tensor, message=message)
        )


def scan_file(root: Path, rel: str) -> FileScan:
    """Scan ``root/rel``: the strict parser first; on any fault, a lenient parse that says which.

    A header the strict parser accepts is still checked for names that appear twice (JSON
    parsers keep the last one silently): cheaply, by counting entries in the raw text.
    """
    path = root / rel
    try:
        header = read_header(path)
    except InputError as exc:
        return _diagnose(path, rel, exc)
    scan = FileScan(
        rel,
        size=header.file_size,
        header_len=header.header_len,
        entries=dict(header.tensors),
        metadata=dict(header.metadata),
        parsed=True,
    )
    try:
        with open(path, "rb") as fh:
            fh.seek(8)
            raw = fh.read(header.header_len)
    except OSError:
        return scan
    if raw.count(b'"data_offsets"') > len(header.tensors):
        return _diagnose(path, rel, None)
    return scan


def _diagnose(path: Path, rel: str, strict_error: InputError | None) -> FileScan:
    """Parse leniently, classify each fault under a rule, keep what is still usable."""
    scan = FileScan(rel)
    raw = _read_raw_header(path, scan)
    if raw is None:
        return scan
    doc = _parse_json(raw, scan)
    if doc is None:
        return scan
    scan.parsed = True
    meta = doc.pop("__metadata__", None)
    if meta is not None and (
        not isinstance(meta, dict) or not all(type(v) is str for v in meta.values())
    ):
        scan.problem(
            "header_valid", "__metadata__ is not a JSON object of strings; the header is corrupt"
        )
    elif meta:
        scan.metadata = dict(meta)
    data_start = 8 + scan.header_len
    data_len = scan.size - data_start
    for name, info in doc.items():
        entry = _parse_entry(name, info, data_start, scan)
        if entry is not None:
            scan.entries[name] = entry
        else:
            scan.broken.add(name)
            scan.unreadable.add(name)
    _check_overlaps(scan)
    _check_in_range(scan, data_start, data_len)
    if not scan.problems and strict_error is not None:
        # the strict parser refused something the lenient one does not classify
        scan.problem("header_valid", _strip_path(strict_error.message, path))
        scan.unreadable |= set(scan.entries)
    return scan


def _read_raw_header(path: Path, scan: FileScan) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            scan.size = os.fstat(fh.fileno()).st_size
            if scan.size < 8:
                scan.problem(
                    "shard_truncated",
                    f"file is {scan.size} bytes, too short for a safetensors header; the shard "
                    "is truncated, re-download or re-export it",
                )
                return None
            (scan.header_len,) = struct.unpack("<Q", fh.read(8))
            if scan.header_len > MAX_HEADER_BYTES:
                scan.problem(
                    "header_valid",
                    f"header length field is {scan.header_len} bytes (limit {MAX_HEADER_BYTES}); "
                    "not a safetensors file or a corrupt header",
                )
                return None
            if 8 + scan.header_len > scan.size:
                scan.problem(
                    "shard_truncated",
                    f"file is {scan.size} bytes but its header alone needs "
                    f"{8 + scan.header_len}; the shard is truncated, re-download or re-export it",
                )
                return None
            return fh.read(scan.header_len)
    except OSError as exc:
        scan.problem("header_valid", f"cannot read the file ({exc.strerror}); check permissions")
        return None


def _parse_json(raw: bytes, scan: FileScan) -> dict | None:
    seen_twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict:
        out: dict = {}
        for k, v in items:
            if k in out:
                seen_twice.append(k)
            out[k] = v
        return out

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs)
    except RecursionError:
        scan.problem(
            "header_valid", "header JSON is nested too deep to parse; the shard is corrupt"
        )
        return None
    except (UnicodeDecodeError, ValueError) as exc:
        scan.problem(
            "header_valid",
            f"header is not valid JSON ({str(exc)[:200]}); the shard is corrupt, re-download or "
            "re-export it",
        )
        return None
    if not isinstance(doc, dict):
        scan.problem("header_valid", "header is not a JSON object; the shard is corrupt")
        return None
    for name in sorted(set(seen_twice)):
        scan.problem(
            "tensor_duplicate",
            "tensor appears twice in this header (loaders keep one silently); re-export the shard",
            tensor=name,
        )
        scan.unreadable.add(name)
    return doc


def _parse_entry(name: str, info: object, data_start: int, scan: FileScan) -> TensorHeader | None:
    def bad(what: str) -> None:
        scan.problem("header_valid", f"header entry {what}; the header is corrupt", tensor=name)

    if not isinstance(info, dict):
        bad("is not an object")
        return None
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        bad(f"has unknown dtype {short_repr(dtype)}")
        return None
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= MAX_DIM for d in shape):
        bad(f"has shape {short_repr(shape)}, not a list of sizes")
        return None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        bad(f"has malformed data_offsets {short_repr(offsets)}")
        return None
    begin, end = offsets
    need = tensor_nbytes(dtype, shape)
    if end - begin != need:
        bad(f"spans {end - begin} bytes but {dtype}{short_repr(shape)} needs {need}")
        return None
    return TensorHeader(name, scan.rel, dtype, tuple(shape), data_start + begin, data_start + end)


def _check_overlaps(scan: FileScan) -> None:
    ordered = sorted(
        ((n, e) for n, e in scan.entries.items() if e.nbytes),
        key=lambda kv: (kv[1].begin, kv[1].end),
    )
    prev: tuple[str, TensorHeader] | None = None
    for name, e in ordered:
        if prev is not None and e.begin < prev[1].end:
            scan.problem(
                "header_valid",
                f"bytes [{e.begin}, {e.end}) overlap tensor {prev[0]!r}; the header is corrupt",
                tensor=name,
            )
            scan.unreadable |= {name, prev[0]}
        if prev is None or e.end > prev[1].end:
            prev = (name, e)


def _check_in_range(scan: FileScan, data_start: int, data_len: int) -> None:
    past = sorted(n for n, e in scan.entries.items() if e.end - data_start > data_len)
    if not past:
        return
    scan.unreadable |= set(past)
    ordered = sorted(scan.entries.values(), key=lambda e: (e.begin, e.end))
    pos = data_start
    contiguous = True
    for e in ordered:
        if e.begin != pos:
            contiguous = False
            break
        pos = e.end
    if contiguous:
        scan.problem(
            "shard_truncated",
            f"file is truncated: its data region has {data_len} bytes but the header describes "
            f"{pos - data_start}; {len(past)} tensor(s) lie past the end (first {past[0]!r}); "
            "re-download or re-export the shard",
        )
        return
    for name in past:
        e = scan.entries[name]
        scan.problem(
            "offsets_in_range",
            f"data_offsets [{e.begin - data_start}, {e.end - data_start}) run past the end of "
            f"the data region ({data_len} bytes); the header is corrupt",
            tensor=name,
        )


def _strip_path(message: str, path: Path) -> str:
    prefix = f"{path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message

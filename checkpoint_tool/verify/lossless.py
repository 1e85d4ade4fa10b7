"""Lossless check: every output tensor holds exactly the source bytes its plan entry names.

For each output file of the plan, its header is read from DST; each planned tensor must be
there with the planned dtype and shape, and its bytes -- compared a bounded segment at a time
(``budget`` bytes of output plus the source rows it needs) -- must equal the source slices,
padding (zero weights, neutral scales) and constants the plan describes
(``verify.expected``). Tensors in DST files that the plan does not name are reported too, as
are ``config.json`` (must equal the planned config), the index ``weight_map`` (hf layout) and
copied side files (same sha256 as in the source).

Memory: one segment of expected bytes, its source rows and the same range of DST at a time.

Example::

    report = check_lossless(plan, source_catalog, Path("/out/model"))
    report.status, report.tensors_checked, report.mismatches[:1]
    # ('failed', 213, [TensorMismatch(tensor='model.layers.1.mlp.experts.3.up_proj.weight',
    #   kind='bytes_differ', elements_differ=2, first_index=[17, 3],
    #   origin='source model.layers.1.mlp.experts.3.up_proj.weight [0:128, 0:128]', ...)])
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.catalog.safetensors_format import FileHeader, read_header
from checkpoint_tool.errors import CkptError, InputError
from checkpoint_tool.execute.progress import NullProgress, Progress
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan
from checkpoint_tool.verify.expected import Segment, TensorLayout, storage_geometry
from checkpoint_tool.verify.report import LosslessReport, MismatchKind, TensorMismatch

DEFAULT_BUDGET = 32 << 20
DEFAULT_MAX_LISTED = 50


class _Files:
    """Open file descriptors by path, closed together."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def read(self, path: Path, begin: int, end: int) -> bytes:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = self._fds[path] = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise InputError(f"{path}: cannot open ({exc.strerror})") from exc
        out = bytearray(end - begin)
        view, got = memoryview(out), 0
        while got < len(out):
            try:
                n = os.preadv(fd, [view[got:]], begin + got)
            except OSError as exc:
                raise InputError(
                    f"{path}: read error at byte {begin + got} ({exc.strerror})"
                ) from exc
            if n == 0:
                raise InputError(
                    f"{path}: file ends at byte {begin + got}, expected data up to {end}; "
                    "the file is truncated"
                )
            got += n
        return bytes(out)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class _OutputUnreadable(Exception):
    """A DST file could not be read (reported per tensor; source read errors still raise)."""


class LosslessChecker:
    """Compares output files one at a time; mismatches collect in ``report``.

    ``check_file(plan.files[i])`` for each weight file, ``check_others()`` for config.json,
    the index and side files, then ``close()``.
    """

    def __init__(
        self,
        plan: Plan,
        catalog: Catalog,
        dst: Path,
        budget: int,
        max_listed: int,
        progress: Progress,
    ) -> None:
        self.plan, self.catalog, self.dst = plan, catalog, Path(dst)
        self.budget, self.max_listed, self.progress = budget, max_listed, progress
        self.files = _Files()
        self.report = LosslessReport(status="passed")

    # -- reporting --------------------------------------------------------------------------
    def mismatch(self, m: TensorMismatch) -> None:
        if len(self.report.mismatches) < self.max_listed:
            self.report.mismatches.append(m)
        else:
            self.report.mismatches_not_listed += 1

    # -- source -----------------------------------------------------------------------------
    def lookup(self, name: str) -> tuple[str, tuple[int, ...]]:
        if name.endswith("@mxfp4"):  # a requantized source: ``verify.requant``
            return self._requant().lookup(name)
        entry = self.catalog.tensors.get(name)
        if entry is None:
            raise InputError(
                f"{self.catalog.root}: the plan reads tensor {name!r}, which the source does not "
                "have; pass the --source DST was converted from"
            )
        return entry.dtype, entry.shape

    def _requant(self):  # type: ignore[no-untyped-def]
        if getattr(self, "_independent", None) is None:
            from checkpoint_tool.verify.requant import IndependentRequant

            self._independent = IndependentRequant(self.catalog)
        return self._independent

    def read_source_rows(self, name: str, r0: int, r1: int) -> np.ndarray:
        if name.endswith("@mxfp4"):
            return self._requant().rows(name, r0, r1)
        entry = self.catalog.tensors[name]
        shape, itemsize = storage_geometry(entry.dtype, entry.shape)
        if not entry.shape:
            shape = (1,)
        row = math.prod(shape[1:]) * itemsize
        begin, end = entry.begin + r0 * row, entry.begin + r1 * row
        if self.catalog.store is not None:  # a remote source: ranged reads (docs/remote.md)
            raw = self.catalog.read_bytes(entry.file, begin, end)
        else:
            raw = self.files.read(self.catalog.path_of(entry), begin, end)
        return np.frombuffer(raw, dtype=np.uint8).reshape((r1 - r0, *shape[1:], itemsize))

    # -- output -----------------------------------------------------------------------------
    def read_dst(self, path: Path, begin: int, end: int) -> bytes:
        try:
            return self.files.read(path, begin, end)
        except InputError as exc:
            raise _OutputUnreadable(exc.message) from exc

    def check_file(self, ofile: OutputFile) -> None:
        path = self.dst / ofile.name
        header: FileHeader | None = None
        kind: MismatchKind = "missing"
        why = "is missing"
        if path.is_file():
            try:
                header = read_header(path)
            except CkptError as exc:
                kind, why = "unreadable", f"cannot be read ({exc.message})"
        if header is None:
            for t in ofile.tensors:
                self.mismatch(
                    TensorMismatch(
                        tensor=t.name,
                        file=ofile.name,
                        kind=kind,
                        message=f"output file {ofile.name} {why}",
                    )
                )
            return
        self.report.files_checked += 1
        planned = {t.name for t in ofile.tensors}
        for name in sorted(set(header.tensors) - planned):
            self.mismatch(
                TensorMismatch(
                    tensor=name,
                    file=ofile.name,
                    kind="unexpected",
                    message="in the output file but not in the plan",
                )
            )
        for t in ofile.tensors:
            self.check_tensor(t, ofile.name, path, header)

    def check_tensor(self, t: OutputTensor, fname: str, path: Path, header: FileHeader) -> None:
        layout = TensorLayout(t, self.lookup)
        th = header.tensors.get(t.name)
        if th is None:
            self.mismatch(
                TensorMismatch(
                    tensor=t.name, file=fname, kind="missing", message="planned, not in the file"
                )
            )
            return
        if th.dtype != t.dtype or list(th.shape) != list(t.shape):
            self.mismatch(
                TensorMismatch(
                    tensor=t.name,
                    file=fname,
                    kind="header_differs",
                    message=f"{th.dtype} {list(th.shape)} in the file, the plan says "
                    f"{t.dtype} {list(t.shape)}",
                )
            )
            return
        self.report.tensors_checked += 1
        self.report.tensors_padded += int(layout.padded)
        differ, first = 0, None
        try:
            for seg in layout.segments(self.read_source_rows, self.budget):
                n, where = self.compare(seg, layout, path, th.begin)
                if n and first is None:
                    first = (seg, where)
                differ += n
                self.report.bytes_compared += seg.stop - seg.start
                self.progress.advance(seg.stop - seg.start)
        except _OutputUnreadable as exc:
            self.mismatch(
                TensorMismatch(tensor=t.name, file=fname, kind="unreadable", message=str(exc))
            )
            return
        if differ:
            assert first is not None
            self.mismatch(self.describe(t, fname, layout, path, th.begin, differ, *first))

    def compare(
        self, seg: Segment, layout: TensorLayout, path: Path, begin: int
    ) -> tuple[int, int]:
        """(elements that differ, index of the first one inside the segment)."""
        item = layout.itemsize
        want = np.ascontiguousarray(seg.expected()).reshape(-1, item)
        got = np.frombuffer(self.read_dst(path, begin + seg.start, begin + seg.stop), np.uint8)
        bad = (want != got.reshape(-1, item)).any(axis=1)
        n = int(bad.sum())
        return n, int(np.argmax(bad)) if n else -1

    def describe(
        self,
        t: OutputTensor,
        fname: str,
        layout: TensorLayout,
        path: Path,
        begin: int,
        differ: int,
        seg: Segment,
        where: int,
    ) -> TensorMismatch:
        item = layout.itemsize
        flat = seg.start // item + where
        index = [int(i) for i in np.unravel_index(flat, layout.shape)] if layout.shape else []
        label = int(np.asarray(seg.labels()).reshape(-1)[where])
        want = np.ascontiguousarray(seg.expected()).reshape(-1, item)[where].tobytes()
        got = self.read_dst(path, begin + flat * item, begin + (flat + 1) * item)
        origin = layout.origin(label)
        return TensorMismatch(
            tensor=t.name,
            file=fname,
            kind="bytes_differ",
            message=f"{differ} of {math.prod(layout.shape) or 1} storage element(s) differ; "
            f"first at {index}, from {origin}",
            elements_differ=differ,
            elements=math.prod(layout.shape) or 1,
            first_index=index,
            origin=origin,
            expected_hex=want.hex(),
            actual_hex=got.hex(),
        )

    # -- non-weight files -------------------------------------------------------------------
    def check_others(self) -> None:
        plan = self.plan
        if plan.config is not None:
            self.check_json("config.json", plan.config, "the planned config.json")
        if plan.options.layout == "hf":
            weight_map = {t.name: f.name for f in plan.files for t in f.tensors}
            index = self.read_json(INDEX_NAME)
            if index is not None:
                got = index.get("weight_map") if isinstance(index, dict) else None
                if got != weight_map:
                    n = _dict_differences(got if isinstance(got, dict) else {}, weight_map)
                    self.file_mismatch(
                        INDEX_NAME, f"weight_map differs from the plan in {n} entr(y/ies)"
                    )
        for rel in plan.side_files:
            if rel == "config.json" and plan.config is not None:
                continue
            src, out = self.catalog.root / rel, self.dst / rel
            if not out.is_file():
                self.file_mismatch(rel, "side file missing in the output")
            elif src.is_file() and _sha256(src) != _sha256(out):
                self.file_mismatch(rel, "side file differs from the source's copy")

    def read_json(self, rel: str) -> object | None:
        path = self.dst / rel
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.file_mismatch(rel, "missing in the output")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.file_mismatch(rel, f"unreadable ({exc})")
        return None

    def check_json(self, rel: str, want: object, what: str) -> None:
        got = self.read_json(rel)
        if got is not None and got != want:
            keys = ""
            if isinstance(got, dict) and isinstance(want, dict):
                diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                keys = f" (keys {', '.join(diff[:5])}{'...' if len(diff) > 5 else ''})"
            self.file_mismatch(rel, f"differs from {what}{keys}")

    def file_mismatch(self, rel: str, message: str) -> None:
        self.mismatch(TensorMismatch(tensor="", file=rel, kind="file_differs", message=message))

    def close(self) -> None:
        """Close the output files opened so far."""
        self.files.close()


def stored_nbytes(t: OutputTensor) -> int:
    """Bytes of an output tensor as stored (``F4``: packed, two values a byte)."""
    shape, itemsize = storage_geometry(t.dtype, t.shape)
    return math.prod(shape) * itemsize


def _dict_differences(a: dict, b: dict) -> int:
    return sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def check_lossless(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    *,
    budget: int = DEFAULT_BUDGET,
    max_listed: int = DEFAULT_MAX_LISTED,
    progress: Progress | None = None,
) -> LosslessReport:
    """Compare every tensor of ``plan`` in ``dst`` with the source bytes it is made of.

    ``progress`` (``execute.progress``) sees the output bytes compared and each file done.
    """
    t0 = time.monotonic()
    prog = progress or NullProgress()
    checker = LosslessChecker(plan, catalog, dst, budget, max_listed, prog)
    total = sum(stored_nbytes(t) for f in plan.files for t in f.tensors)
    prog.start(total, len(plan.files))
    try:
        for ofile in plan.files:
            checker.check_file(ofile)
            prog.file_done(ofile.name, sum(stored_nbytes(t) for t in ofile.tensors))
        checker.check_others()
    finally:
        checker.close()
        prog.close()
    report = checker.report
    report.status = "failed" if report.mismatch_count else "passed"
    report.seconds = round(time.monotonic() - t0, 3)
    return report

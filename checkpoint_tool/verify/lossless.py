"""Lossless check: every output tensor holds exactly the source bytes its plan entry names.

For each output file of the plan, its header is read from DST; each planned tensor must be
there with the planned dtype and shape, and its bytes -- compared a bounded segment at a time
(``budget`` bytes of output plus the source rows it needs) -- must equal the source slices,
padding (zero weights, neutral scales) and constants the plan describes
(``verify.expected``). Tensors in DST files that the plan does not name are reported too, as
are ``config.json`` (must equal the planned config), the index ``weight_map`` (hf layout) and
copied side files (same sha256 as in the source).

Speed: segments are compared by ``workers`` threads at once, across tensors and files, in
batches of about ``TASK_BYTES``; results are gathered in plan order, so the report is the same
for any number of workers. A segment whose expected bytes are plain source ranges and fills
(``Segment.runs``: renamed, stacked, concatenated, padded on dim 0) is compared file range
against file range, ``verify.chunks.CHUNK`` bytes at a time (reads release the GIL, the compare
is a memcmp in cache); any other segment, and any segment found to differ (to say where), is
built as an array by ``verify.expected`` and compared element by element.

Memory: per worker, two chunks, or one segment of expected bytes (``budget / workers``, one
row at least), its source rows and the same range of DST.

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
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.catalog.files import Files
from checkpoint_tool.catalog.safetensors_format import FileHeader, read_header
from checkpoint_tool.errors import CkptError, InputError
from checkpoint_tool.execute.progress import NullProgress, Progress
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan
from checkpoint_tool.verify.chunks import same_runs
from checkpoint_tool.verify.expected import Segment, TensorLayout, storage_geometry
from checkpoint_tool.verify.report import LosslessReport, MismatchKind, TensorMismatch

DEFAULT_BUDGET = 32 << 20
DEFAULT_MAX_LISTED = 50
#: bytes of segments handed to a worker at once (fewer, larger tasks: less pool overhead)
TASK_BYTES = 64 << 20
#: the array path's segments are never cut below this (one row at least anyway)
MIN_SEGMENT = 1 << 20


def default_workers() -> int:
    """Threads of the lossless check: the usable cores, at most 8 (past that the threads wait on
    each other, not on the disk: ``bench_verify.py --sweep`` on 16 cores, docs/verify.md)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


@dataclass(eq=False)
class _Tensor:
    """One planned tensor under check: where it is in DST and what its segments found."""

    t: OutputTensor
    fname: str
    layout: TensorLayout
    path: Path
    begin: int
    differ: int = 0
    first: tuple[Segment, int] | None = None
    unreadable: str | None = None


@dataclass
class _Batch:
    """Entries in plan order: ``(tensor, segment)`` to compare, or a ready mismatch / a file
    done (``(None, mismatch)``, ``(None, (name, nbytes))``)."""

    entries: list[tuple[_Tensor | None, object]] = field(default_factory=list)
    nbytes: int = 0


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
        workers: int | None = None,
    ) -> None:
        self.plan, self.catalog, self.dst = plan, catalog, Path(dst)
        self.budget, self.max_listed, self.progress = budget, max_listed, progress
        self.workers = max(1, workers or default_workers())
        self.segment_budget = max(MIN_SEGMENT, budget // self.workers)
        self.files = Files()
        self.report = LosslessReport(status="passed")
        self._requant_lock = threading.Lock()

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
            with self._requant_lock:  # one requantizer, its cache shared by the workers
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

    def source_range(self, name: str) -> tuple[Path, int] | None:
        """(file, offset of the tensor's first byte) of a local source tensor, else None."""
        if name.endswith("@mxfp4") or self.catalog.store is not None:
            return None
        entry = self.catalog.tensors[name]
        return self.catalog.path_of(entry), entry.begin

    # -- the pipeline -----------------------------------------------------------------------
    def check_file(self, ofile: OutputFile) -> None:
        """Check one output file (``check_files`` of it)."""
        self.check_files([ofile])

    def check_files(self, files: Sequence[OutputFile]) -> None:
        """Check ``files``: ``workers`` threads compare their segments, results in plan order;
        ``progress`` sees the bytes and each file done."""
        if self.workers == 1:  # no threads: no hand-offs
            for batch in self._batches(files):
                done: Future[list[object]] = Future()
                done.set_result(self._run_batch(batch))
                self._gather(batch, done)
            return
        window = 2 * self.workers
        pending: deque[tuple[_Batch, Future[list[object]]]] = deque()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="ckpt-verify") as pool:
            try:
                for batch in self._batches(files):
                    pending.append((batch, pool.submit(self._run_batch, batch)))
                    while len(pending) > window:
                        self._gather(*pending.popleft())
                while pending:
                    self._gather(*pending.popleft())
            finally:
                for _, f in pending:
                    f.cancel()

    def _batches(self, files: Sequence[OutputFile]) -> Iterator[_Batch]:
        batch = _Batch()
        for ofile in files:
            for tensor, item in self._file_entries(ofile):
                batch.entries.append((tensor, item))
                if isinstance(item, Segment):
                    batch.nbytes += item.stop - item.start
                if batch.nbytes >= TASK_BYTES or len(batch.entries) >= 4096:
                    yield batch
                    batch = _Batch()
            batch.entries.append((None, (ofile.name, sum(stored_nbytes(t) for t in ofile.tensors))))
        if batch.entries:
            yield batch

    def _file_entries(self, ofile: OutputFile) -> Iterator[tuple[_Tensor | None, object]]:
        """The file's header findings and its tensors' segments, in plan order; a tensor's
        last entry is ``(tensor, None)``."""
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
                yield None, TensorMismatch(
                    tensor=t.name, file=ofile.name, kind=kind,
                    message=f"output file {ofile.name} {why}",
                )  # fmt: skip
            return
        self.report.files_checked += 1
        planned = {t.name for t in ofile.tensors}
        for name in sorted(set(header.tensors) - planned):
            yield None, TensorMismatch(
                tensor=name, file=ofile.name, kind="unexpected",
                message="in the output file but not in the plan",
            )  # fmt: skip
        for t in ofile.tensors:
            yield from self._tensor_entries(t, ofile.name, path, header)

    def _tensor_entries(
        self, t: OutputTensor, fname: str, path: Path, header: FileHeader
    ) -> Iterator[tuple[_Tensor | None, object]]:
        layout = TensorLayout(t, self.lookup)
        th = header.tensors.get(t.name)
        if th is None:
            yield (
                None,
                TensorMismatch(
                    tensor=t.name, file=fname, kind="missing", message="planned, not in the file"
                ),
            )
            return
        if th.dtype != t.dtype or list(th.shape) != list(t.shape):
            yield None, TensorMismatch(
                tensor=t.name, file=fname, kind="header_differs",
                message=f"{th.dtype} {list(th.shape)} in the file, the plan says "
                f"{t.dtype} {list(t.shape)}",
            )  # fmt: skip
            return
        self.report.tensors_checked += 1
        self.report.tensors_padded += int(layout.padded)
        state = _Tensor(t, fname, layout, path, th.begin)
        for seg in layout.segments(self.read_source_rows, self.segment_budget):
            yield state, seg
        yield state, None

    def _run_batch(self, batch: _Batch) -> list[object]:
        """In a worker: each segment's ``(elements that differ, first index)``, or the
        message of an unreadable DST; other entries pass through."""
        out: list[object] = []
        for state, item in batch.entries:
            if state is None or item is None or state.unreadable:
                out.append(None)
                continue
            assert isinstance(item, Segment)
            try:
                out.append(self.compare_segment(item, state))
            except _OutputUnreadable as exc:
                out.append(str(exc))
        return out

    def compare_segment(self, seg: Segment, state: _Tensor) -> tuple[int, int]:
        """Runs first (file ranges, chunk by chunk); the array compare when they differ."""
        if seg.runs is not None:
            try:
                same = same_runs(
                    self.files, seg.runs, self.source_range, state.path,
                    state.begin + seg.start,
                )  # fmt: skip
            except InputError as exc:
                if exc.message.startswith(str(state.path)):
                    raise _OutputUnreadable(exc.message) from exc
                raise
            if same is not None:
                if same:
                    return 0, -1
        return self.compare(seg, state.layout, state.path, state.begin)

    def _gather(self, batch: _Batch, future: Future[list[object]]) -> None:
        """Fold one batch's results into the report, in plan order."""
        results = future.result()
        for (state, item), res in zip(batch.entries, results, strict=True):
            if state is None:
                if isinstance(item, TensorMismatch):
                    self.mismatch(item)
                else:
                    done: tuple[str, int] = item  # type: ignore[assignment]
                    self.progress.file_done(*done)
            elif item is None:
                self._finish(state)
            elif isinstance(res, str):
                state.unreadable = state.unreadable or res
            elif res is not None and state.unreadable is None:
                assert isinstance(item, Segment) and isinstance(res, tuple)
                n, where = res
                if n and state.first is None:
                    state.first = (item, where)
                state.differ += n
                self.report.bytes_compared += item.stop - item.start
                self.progress.advance(item.stop - item.start)

    def _finish(self, s: _Tensor) -> None:
        if s.unreadable:
            self.mismatch(
                TensorMismatch(
                    tensor=s.t.name, file=s.fname, kind="unreadable", message=s.unreadable
                )
            )
        elif s.differ:
            assert s.first is not None
            self.mismatch(
                self.describe(s.t, s.fname, s.layout, s.path, s.begin, s.differ, *s.first)
            )

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
    workers: int | None = None,
) -> LosslessReport:
    """Compare every tensor of ``plan`` in ``dst`` with the source bytes it is made of.

    ``progress`` (``execute.progress``) sees the output bytes compared and each file done;
    ``workers`` threads compare (None: ``default_workers()``).
    """
    t0 = time.monotonic()
    prog = progress or NullProgress()
    checker = LosslessChecker(plan, catalog, dst, budget, max_listed, prog, workers)
    total = sum(stored_nbytes(t) for f in plan.files for t in f.tensors)
    prog.start(total, len(plan.files))
    try:
        checker.check_files(plan.files)
        checker.check_others()
    finally:
        checker.close()
        prog.close()
    report = checker.report
    report.status = "failed" if report.mismatch_count else "passed"
    report.seconds = round(time.monotonic() - t0, 3)
    return report

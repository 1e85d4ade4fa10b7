"""Run a Plan: write every output file atomically, in parallel, resumably; manifest last.

Order of a run:

1. build every output tensor's node tree (``execute.ops``) — a bad plan fails before DST is
   touched; open the source shards and check they still match the catalog the plan was made from;
2. prepare DST (``execute.destination``: fresh, ``--resume`` or ``--overwrite``) and its journal;
3. on resume, verify each journaled file by recomputing its sha256 (kept if equal, rewritten
   otherwise); write the remaining weight files with K worker threads, each file under a
   temporary name, fsynced and renamed, then recorded in the journal;
4. copy side files, write ``config.json`` and ``model.safetensors.index.json`` (atomically);
5. re-check that no source shard changed, write ``ckpt-manifest.json``, delete the journal.

``durable=False`` (``ckpt convert --no-fsync``) skips every fsync and the early write-back:
files still appear under their final names only once complete, the journal and ``--resume``
work as before (journaled files are re-hashed), and the manifest is still written last, so a
killed process leaves nothing incomplete; only a power loss or OS crash can lose recent writes.
The output bytes and the manifest do not depend on it.

Threads, not processes: every heavy step (``preadv``, ``write``, sha256, numpy copies) releases
the GIL, and threads share the shard descriptors. Each file's bytes depend only on the plan, so
the output is identical for any worker count.

Example::

    report = execute_plan(plan, catalog, Path("/out/model"), workers=2)
    report.files_written, report.total_size   # (4, 15032385536)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path, PurePosixPath
from typing import Protocol

from pydantic import BaseModel

from checkpoint_tool import __version__
from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.execute.destination import prepare_destination
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    FileRecord,
    Journal,
    Manifest,
    SourceFileRecord,
    WeightFileRecord,
    plan_sha256,
    write_journal,
    write_manifest,
)
from checkpoint_tool.execute.ops import Node, build_node
from checkpoint_tool.execute.progress import Progress, make_progress
from checkpoint_tool.execute.readahead import Prefetcher, merge_ranges, node_ranges
from checkpoint_tool.execute.source import RangeReader, SourceFiles
from checkpoint_tool.execute.stream import Cancelled, TensorStream
from checkpoint_tool.execute.writer import (
    SafetensorsWriter,
    _os_error,
    fsync,
    fsync_dir,
    partial_name,
    write_bytes_atomic,
)
from checkpoint_tool.plan.model import OutputFile, Plan

DEFAULT_MEMORY_BUDGET = 1 << 30
MAX_CHUNK = 64 << 20
MIN_CHUNK = 1 << 20
CONFIG_NAME = "config.json"
#: read the source ahead of the copy (``execute.readahead``); CKPT_PREFETCH=0 turns it off (A/B)
PREFETCH = os.environ.get("CKPT_PREFETCH", "1") != "0"
WEIGHT_METADATA = {"format": "pt"}


class ConvertReport(BaseModel):
    """What a run did (``ckpt convert --format json`` prints it)."""

    dst: str
    resumed: bool
    files_written: int
    files_kept: int
    bytes_written: int
    tensor_count: int
    total_size: int
    other_files: list[str]
    dropped: int
    manifest_sha256: str
    workers: int
    chunk_bytes: int
    seconds: float
    durable: bool = True


def chunk_size(memory_budget: int, workers: int) -> int:
    """Bytes per buffer: each worker holds three (two writer staging buffers, one read buffer).

    ``chunk_size(1 << 30, 1)`` -> 64 MiB (capped); ``chunk_size(64 << 20, 4)`` -> 4 MiB.
    """
    chunk = memory_budget // (4 * workers)
    if chunk < MIN_CHUNK:
        raise UsageError(
            f"--memory-budget {memory_budget} bytes is too small for {workers} worker(s); give at "
            f"least {4 * workers * MIN_CHUNK >> 20} MiB or fewer --workers"
        )
    return min(MAX_CHUNK, chunk // MIN_CHUNK * MIN_CHUNK)


def execute_plan(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    *,
    workers: int = 1,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | Progress = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    hash_source: bool = False,
    durable: bool = True,
    pool: FilePool | None = None,
) -> ConvertReport:
    """Write ``plan`` into ``dst``: weight files, side files, config, index, manifest last.

    ``pool`` spreads the weight files (default: ``workers`` threads of this process; a
    ``checkpoint_tool.execute.distributed.ray_pool.RayPool`` runs them as Ray tasks)."""
    t0 = time.monotonic()
    dst = Path(dst)
    pool = pool or ThreadPool(workers)
    if pool.workers < 1:
        raise UsageError(f"--workers {pool.workers}: give 1 or more")
    # no more workers than files are ever busy (a Ray pool counts a whole cluster's CPUs)
    chunk = chunk_size(memory_budget, max(1, min(pool.workers, len(plan.files))))
    check_plan(plan, catalog)
    others = other_files(plan, catalog)
    weight_names = [f.name for f in plan.files]
    prog = make_progress(progress) if isinstance(progress, bool) else progress
    with SourceFiles.open(catalog, catalog.files) as sources:
        sha = plan_sha256(plan)
        state = prepare_destination(
            dst,
            [*weight_names, *others],
            sha,
            resume=resume,
            overwrite=overwrite,
            durable=durable,
        )
        run = FileRun(plan, sources, dst, state.journal, chunk, prog, durable)
        totals = file_totals(plan)
        prog.start(sum(totals), len(plan.files))
        try:
            todo = run.verify_done(pool.workers)
            pool.write(run, todo)
            weight_records = [run.journal.done[f.name] for f in plan.files]
            manifest_sha = finish_output(run, others, sha, weight_records, hash_source)
        finally:
            prog.close()
        (dst / JOURNAL_NAME).unlink(missing_ok=True)
        fsync_dir(dst, durable)
    return ConvertReport(
        dst=str(dst),
        resumed=state.resumed,
        files_written=len(todo),
        files_kept=len(plan.files) - len(todo),
        bytes_written=sum(totals[i] for i in todo),
        tensor_count=plan.tensor_count(),
        total_size=sum(totals),
        other_files=sorted(others),
        dropped=len(plan.dropped),
        manifest_sha256=manifest_sha,
        workers=pool.workers,
        chunk_bytes=chunk,
        seconds=round(time.monotonic() - t0, 3),
        durable=durable,
    )


def file_totals(plan: Plan) -> list[int]:
    """Tensor bytes of each planned output file (headers excluded), in plan order."""
    return [sum(_tensor_bytes(t) for t in f.tensors) for f in plan.files]


def finish_output(
    run: FileRun,
    others: list[str],
    sha: str,
    weight_records: list[FileRecord],
    hash_source: bool,
) -> str:
    """Side files, config, index, a last check of the source, then the manifest; its sha256.

    The same for every way of writing the weight files (threads, Ray, parts + ``--finalize``):
    the manifest depends only on the plan, the source and the weight files' records."""
    plan, sources = run.plan, run.sources
    other_records = run.write_others(others, sources.catalog)
    used = sorted(
        {sources.catalog.tensors[p.source].file for f in plan.files for t in f.tensors
         for p in t.pieces}
    )  # fmt: skip
    sources.check_unchanged(used)
    source_records = _source_records(sources, hash_source, run.progress)
    manifest = Manifest(
        ckpt_version=__version__,
        plan_sha256=sha,
        source=plan.source,
        source_revision=plan.source_revision,
        source_hashing="full" if hash_source else "header",
        source_files=source_records,
        recipe=plan.recipe,
        options=plan.options,
        files=[
            WeightFileRecord(name=r.name, size=r.size, sha256=r.sha256, tensors=len(f.tensors))
            for r, f in zip(weight_records, plan.files, strict=True)
        ],
        other_files=other_records,
        tensor_count=plan.tensor_count(),
        total_size=sum(file_totals(plan)),
        dropped=plan.dropped,
    )
    manifest_sha = write_manifest(run.dst, manifest, durable=run.durable)
    fault_point("manifest")
    return manifest_sha


class FilePool(Protocol):
    """Writes the weight files ``todo`` (plan indexes) of a run, recording each as it ends."""

    workers: int

    def write(self, run: FileRun, todo: list[int]) -> None: ...


class ThreadPool:
    """``workers`` threads of this process, one output file per task (the default)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def write(self, run: FileRun, todo: list[int]) -> None:
        run.write_files(todo, self.workers)


def _tensor_bytes(t) -> int:  # type: ignore[no-untyped-def]
    from checkpoint_tool.catalog.safetensors_format import tensor_nbytes

    return tensor_nbytes(t.dtype, t.shape)


def check_plan(plan: Plan, catalog: Catalog) -> None:
    """Build every tensor's node tree once, to check the whole plan before anything is written
    (the trees are rebuilt per file while writing: memory stays flat on 100k-tensor plans)."""
    seen_files: set[str] = set()
    seen_tensors: dict[tuple[int | None, str], str] = {}  # per rank (vllm-sharded repeats names)
    for f in plan.files:
        _check_name(f.name, "output file")
        if not f.name.endswith(".safetensors"):
            raise InputError(f"{f.name}: output weight files must end in .safetensors; re-plan")
        if f.name in seen_files:
            raise InputError(f"{f.name}: planned twice; the plan is inconsistent, re-plan")
        seen_files.add(f.name)
        for t in f.tensors:
            if (f.rank, t.name) in seen_tensors:
                raise InputError(
                    f"{t.name}: planned in {seen_tensors[f.rank, t.name]} and {f.name}; re-plan"
                )
            seen_tensors[f.rank, t.name] = f.name
        for t in f.tensors:
            build_node(t, catalog.tensors)


def _check_name(name: str, what: str) -> None:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or name.startswith("."):
        raise InputError(f"{name!r}: {what} name must be a relative path inside DST; re-plan")


def other_files(plan: Plan, catalog: Catalog) -> list[str]:
    """Names of the non-weight files this run writes (side files, config, index)."""
    reserved = {MANIFEST_NAME, JOURNAL_NAME, INDEX_NAME} | {f.name for f in plan.files}
    names = []
    for rel in plan.side_files:
        _check_name(rel, "side file")
        if rel in reserved or rel.endswith(".safetensors"):
            raise InputError(f"{rel}: side file would overwrite an output of ckpt; re-plan")
        if rel == CONFIG_NAME and plan.config is not None:
            continue
        if not (catalog.root / rel).is_file():
            raise InputError(
                f"{catalog.root / rel}: side file planned for copying is missing; restore it or "
                "re-plan"
            )
        names.append(rel)
    if plan.config is not None:
        names.append(CONFIG_NAME)
    if plan.options.layout == "hf":
        names.append(INDEX_NAME)
    return sorted(names)


class FileRun:
    """State shared by the workers of one run (journal under a lock, stop flag)."""

    def __init__(
        self,
        plan: Plan,
        sources: SourceFiles,
        dst: Path,
        journal: Journal,
        chunk: int,
        progress: Progress,
        durable: bool = True,
    ) -> None:
        self.plan, self.sources, self.dst = plan, sources, dst
        self.durable = durable
        self.journal, self.chunk, self.progress = journal, chunk, progress
        self.stop = threading.Event()
        self.prefetch = PREFETCH
        self._lock = threading.Lock()
        self._local = threading.local()

    def _stream(self) -> TensorStream:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = TensorStream(RangeReader(self.sources, self.chunk), self.stop)
            self._local.stream = stream
        return stream

    # -- resume -----------------------------------------------------------------------------
    def verify_done(self, workers: int) -> list[int]:
        """Indexes of the files still to write (journaled files are re-hashed and kept if equal)."""
        candidates = [i for i, f in enumerate(self.plan.files) if f.name in self.journal.done]

        def check(i: int) -> bool:
            rec = self.journal.done[self.plan.files[i].name]
            path = self.dst / rec.name
            ok = (
                path.is_file()
                and path.stat().st_size == rec.size
                and _file_sha256(path, self.chunk, self.stop) == rec.sha256
            )
            if ok:
                nbytes = sum(_tensor_bytes(t) for t in self.plan.files[i].tensors)
                self.progress.file_done(rec.name, nbytes, skipped=True)
            return ok

        results = self._map(check, candidates, workers)
        kept = {i for i, ok in zip(candidates, results, strict=True) if ok}
        with self._lock:
            for i in candidates:
                if i not in kept:
                    del self.journal.done[self.plan.files[i].name]
        return [i for i in range(len(self.plan.files)) if i not in kept]

    # -- weights ----------------------------------------------------------------------------
    def write_files(self, todo: list[int], workers: int) -> None:
        self._map(self._write_file, todo, workers)

    def _write_file(self, i: int) -> None:
        self.record(i, self.write_only(i))

    def write_only(self, i: int) -> FileRecord:
        """Write plan file ``i`` under its final name (atomically); its record. No journal."""
        ofile: OutputFile = self.plan.files[i]
        stream = self._stream()
        header = [(t.name, t.dtype, tuple(t.shape)) for t in ofile.tensors]
        nodes = [build_node(t, self.sources.catalog.tensors) for t in ofile.tensors]
        stream.reader.expect(nodes)  # remote sources prefetch these reads (execute.remote_prefetch)
        with (
            SafetensorsWriter(
                self.dst / ofile.name,
                header,
                metadata=WEIGHT_METADATA,
                buffer_size=self.chunk,
                durable=self.durable,
            ) as w,
            self._readahead(nodes) as pf,
        ):
            sink = _CountingSink(w, self.progress, pf)
            for t, node in zip(ofile.tensors, nodes, strict=True):
                w.begin_tensor(t.name)
                stream.fill(node, sink)
                w.end_tensor()
            files = {
                self.sources.catalog.tensors[p.source].file for t in ofile.tensors for p in t.pieces
            }
            self.sources.check_unchanged(sorted(files))
        return FileRecord(name=ofile.name, size=w.size, sha256=w.sha256)

    def record(self, i: int, rec: FileRecord, *, count_bytes: bool = False) -> None:
        """Journal a committed file (under the lock) and report it; ``count_bytes``: its bytes
        were written elsewhere (another process) and never reached ``progress.advance``."""
        with self._lock:
            self.journal.done[rec.name] = rec
            self.save_journal(self.journal)
        fault_point("journal")
        nbytes = sum(_tensor_bytes(t) for t in self.plan.files[i].tensors)
        if count_bytes:
            self.progress.advance(nbytes)
        self.progress.file_done(rec.name, nbytes)

    def save_journal(self, journal: Journal) -> None:
        """Persist the journal (a part run keeps its own record instead: ``distributed.parts``)."""
        write_journal(self.dst, journal, durable=self.durable)

    def _readahead(self, nodes: list[Node]) -> Prefetcher:
        """Kernel read-ahead of a local file's source ranges in output order (``execute.readahead``)."""
        if not self.prefetch:
            return Prefetcher([])
        ranges = merge_ranges(r for node in nodes for r in node_ranges(node))
        try:
            fds = {rel: self.sources.fd(rel) for rel in {r[0] for r in ranges}}
        except (AttributeError, KeyError, TypeError, ValueError):  # no local descriptors
            return Prefetcher([])
        if not all(isinstance(fd, int) and fd >= 0 for fd in fds.values()):
            return Prefetcher([])
        return Prefetcher([(fds[rel], b, e) for rel, b, e in ranges])

    def _map(self, fn, items: list[int], workers: int) -> list:  # type: ignore[no-untyped-def]
        """Run ``fn`` over ``items``; on the first failure stop the others and raise it."""
        if workers == 1 or len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-writer") as pool:
            futures = [pool.submit(fn, i) for i in items]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:
                self.stop.set()
                raise
            if any(f.done() and f.exception() is not None for f in futures):
                self.stop.set()
            wait(futures)
        errors = [f.exception() for f in futures if f.exception() is not None]
        real = [e for e in errors if not isinstance(e, Cancelled)]
        if real or errors:
            raise (real or errors)[0]
        return [f.result() for f in futures]

    # -- the rest ---------------------------------------------------------------------------
    def write_others(self, names: list[str], catalog: Catalog) -> list[FileRecord]:
        """Side files (copied), config.json and the index; returns their records, sorted."""
        records = []
        durable = self.durable
        for name in names:
            if name == INDEX_NAME:
                data = _index_bytes(self.plan)
                sha = write_bytes_atomic(self.dst / name, data, durable=durable)
                records.append(_record(name, data, sha))
            elif name == CONFIG_NAME and self.plan.config is not None:
                data = (json.dumps(self.plan.config, indent=2, sort_keys=True) + "\n").encode()
                sha = write_bytes_atomic(self.dst / name, data, durable=durable)
                records.append(_record(name, data, sha))
            else:
                src = catalog.root / name
                records.append(_copy_file(src, self.dst, name, self.chunk, durable))
            fault_point("other")
        return records


class _CountingSink:
    """The writer as a stream sink, reporting filled bytes to the progress display."""

    def __init__(
        self, writer: SafetensorsWriter, progress: Progress, prefetch: Prefetcher | None = None
    ) -> None:
        self.writer, self.progress, self.prefetch = writer, progress, prefetch
        self.capacity = writer.capacity

    def reserve(self, nbytes: int) -> memoryview:
        return self.writer.reserve(nbytes)

    def advance(self, nbytes: int) -> None:
        self.writer.advance(nbytes)
        self.progress.advance(nbytes)
        if self.prefetch is not None:
            self.prefetch.consumed(nbytes)

    def copy_range(self, fd: int, offset: int, nbytes: int, label: str) -> None:
        self.writer.copy_range(fd, offset, nbytes, label)
        self.progress.advance(nbytes)
        if self.prefetch is not None:
            self.prefetch.consumed(nbytes)


def _record(name: str, data: bytes, sha: str) -> FileRecord:
    return FileRecord(name=name, size=len(data), sha256=sha)


def _index_bytes(plan: Plan) -> bytes:
    """``model.safetensors.index.json``: total_size = sum of tensor bytes, weight_map sorted."""
    weight_map = {t.name: f.name for f in plan.files for t in f.tensors}
    total = sum(_tensor_bytes(t) for f in plan.files for t in f.tensors)
    doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(doc, indent=2) + "\n").encode()


def _copy_file(src: Path, root: Path, name: str, chunk: int, durable: bool = True) -> FileRecord:
    """Copy a side file to ``root / name`` atomically in bounded chunks, hashing it."""
    dst = root / name
    tmp = partial_name(dst)
    h, size = hashlib.sha256(), 0
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as fin:
            try:
                with open(tmp, "wb") as fout:
                    while block := fin.read(min(chunk, 8 << 20)):
                        fout.write(block)
                        h.update(block)
                        size += len(block)
                    fout.flush()
                    fsync(fout.fileno(), durable)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise _os_error(dst, exc, "cannot write") from exc
        os.replace(tmp, dst)
        fsync_dir(dst.parent, durable)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{src}: cannot copy side file ({exc.strerror})") from exc
    return FileRecord(name=name, size=size, sha256=h.hexdigest())


def _file_sha256(path: Path, chunk: int, stop: threading.Event) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            if stop.is_set():
                raise Cancelled()
            h.update(block)
    return h.hexdigest()


def _source_records(
    sources: SourceFiles, hash_source: bool, progress: Progress
) -> list[SourceFileRecord]:
    records = []
    for rel, st in sorted(sources.stats.items()):
        full = None
        if hash_source:
            progress.note(f"hashing source {rel} ({st.size} bytes)")
            full = sources.full_sha256(rel)
        records.append(
            SourceFileRecord(name=rel, size=st.size, header_sha256=st.header_sha256, sha256=full)
        )
    return records

"""One output weight file at a time: ``FileRun`` streams a planned file's tensors into an
atomic safetensors file (read-ahead, progress, journal), and writes the side files, config and
index; ``ThreadPool`` runs files on threads (``execute.distributed`` on Ray tasks or parts).

Example::

    run = FileRun(plan, sources, dst, journal, chunk, progress)
    todo = run.verify_done(workers=2)     # files a resumed run still has to write
    ThreadPool(2).write(run, todo)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Protocol

from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.errors import InputError
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.index_file import index_chunks
from checkpoint_tool.execute.manifest import (
    FileRecord,
    Journal,
    write_journal,
)
from checkpoint_tool.execute.ops import Node
from checkpoint_tool.execute.paths import inside_source
from checkpoint_tool.execute.progress import Progress
from checkpoint_tool.execute.readahead import Prefetcher, merge_ranges, node_ranges
from checkpoint_tool.execute.requant_node import RequantCache
from checkpoint_tool.execute.source import RangeReader, SourceFiles
from checkpoint_tool.execute.stream import Cancelled, TensorStream
from checkpoint_tool.execute.tree import build_node, files_read
from checkpoint_tool.execute.writer import (
    SafetensorsWriter,
    fsync,
    fsync_dir,
    partial_name,
    write_bytes_atomic,
    write_chunks_atomic,
    write_error,
)
from checkpoint_tool.plan.model import OutputFile, OutputTensor, Plan

CONFIG_NAME = "config.json"
#: read the source ahead of the copy (``execute.readahead``); CKPT_PREFETCH=0 turns it off (A/B)
PREFETCH = os.environ.get("CKPT_PREFETCH", "1") != "0"
WEIGHT_METADATA = {"format": "pt"}


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


def tensor_bytes(t: OutputTensor) -> int:
    return tensor_nbytes(t.dtype, t.shape)


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
        #: requantized modules shared by this run's files (the TP slices and FSE slots of a
        #: module are read and quantized once while it fits): at most one buffer's size
        self.requant = RequantCache(max_bytes=chunk)

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
                nbytes = sum(tensor_bytes(t) for t in self.plan.files[i].tensors)
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
        nodes = [build_node(t, self.sources.catalog.tensors, self.requant) for t in ofile.tensors]
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
            self.sources.check_unchanged(files_read(self.sources.catalog.tensors, [ofile]))
        return FileRecord(name=ofile.name, size=w.size, sha256=w.sha256)

    def record(self, i: int, rec: FileRecord, *, count_bytes: bool = False) -> None:
        """Journal a committed file (under the lock) and report it; ``count_bytes``: its bytes
        were written elsewhere (another process) and never reached ``progress.advance``."""
        with self._lock:
            self.journal.done[rec.name] = rec
            self.save_journal(self.journal)
        fault_point("journal")
        nbytes = sum(tensor_bytes(t) for t in self.plan.files[i].tensors)
        if count_bytes:
            self.progress.advance(nbytes)
        self.progress.file_done(rec.name, nbytes)

    def save_journal(self, journal: Journal) -> None:
        """Persist the journal (a part run keeps its own record instead: ``distributed.parts``)."""
        write_journal(self.dst, journal, durable=self.durable)

    def _readahead(self, nodes: list[Node]) -> Prefetcher:
        """Kernel read-ahead of a local file's source ranges in output order (``execute.readahead``)."""
        if not self.prefetch or not self.sources.local:  # remote: ``sources.prefetch``
            return Prefetcher([])
        ranges = merge_ranges(r for node in nodes for r in node_ranges(node))
        return Prefetcher([(self.sources.fd(rel), b, e) for rel, b, e in ranges])

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
                chunks = index_chunks(self.plan)
                size, sha = write_chunks_atomic(self.dst / name, chunks, durable=durable)
                records.append(FileRecord(name=name, size=size, sha256=sha))
            elif name == CONFIG_NAME and self.plan.config is not None:
                data = (json.dumps(self.plan.config, indent=2, sort_keys=True) + "\n").encode()
                sha = write_bytes_atomic(self.dst / name, data, durable=durable)
                records.append(_record(name, data, sha))
            else:  # read through its resolved path, which must lie inside SRC
                src = inside_source(catalog.root, name)
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
                    fault_point("write")
                    fsync(fout.fileno(), durable)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise write_error(dst, exc, "cannot write") from exc
        os.replace(tmp, dst)
        fault_point("rename")
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

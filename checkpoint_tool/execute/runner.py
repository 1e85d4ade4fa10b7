"""Run a Plan: write every output file atomically, in parallel, resumably; manifest last.

Order of a run:

0. refuse a DST that is, holds or lies inside SRC (``execute.paths``), before anything else;
1. build every output tensor's node tree (``execute.ops``) — a bad plan fails before DST is
   touched; open the source shards and check they still match the catalog the plan was made from;
2. prepare DST (``execute.destination``: fresh, ``--resume`` or ``--overwrite``) and its journal,
   which records each source shard's identity (a resumed run stops on a changed shard);
3. on resume, verify each journaled file by recomputing its sha256 (kept if equal, rewritten
   otherwise); write the remaining weight files with K worker threads, each file under a
   temporary name, fsynced and renamed, then recorded in the journal;
4. copy side files, write ``config.json`` and ``model.safetensors.index.json`` (atomically);
5. re-check that no source shard changed (size, mtime, and the content id of
   ``execute.source_identity``), write ``ckpt-manifest.json``, delete the journal.

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

import time
from pathlib import Path, PurePosixPath

import numpy as np
from pydantic import BaseModel

from checkpoint_tool import __version__
from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.execute.destination import prepare_destination
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.file_run import (
    CONFIG_NAME,
    FilePool,
    FileRun,
    ThreadPool,
    tensor_bytes,
)
from checkpoint_tool.execute.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    SourceFileRecord,
    WeightFileRecord,
    plan_sha256,
    write_manifest,
)
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.execute.pages import release_free_heap
from checkpoint_tool.execute.paths import check_apart, inside_source
from checkpoint_tool.execute.progress import Progress, make_progress
from checkpoint_tool.execute.source import SourceFiles
from checkpoint_tool.execute.source_identity import SourceIdentity
from checkpoint_tool.execute.tree import build_node, files_read
from checkpoint_tool.execute.writer import (
    fsync_dir,
)
from checkpoint_tool.plan.model import Plan

DEFAULT_MEMORY_BUDGET = 1 << 30
MAX_CHUNK = 64 << 20
MIN_CHUNK = 1 << 20


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
    release_free_heap()  # what planning freed is not carried through the run
    dst = Path(dst)
    check_apart(catalog.root, dst)  # before anything: DST never is, holds or lies in SRC
    pool = pool or ThreadPool(workers)
    if pool.workers < 1:
        raise UsageError(f"--workers {pool.workers}: give 1 or more")
    # no more workers than files are ever busy (a Ray pool counts a whole cluster's CPUs)
    chunk = chunk_size(memory_budget, max(1, min(pool.workers, len(plan.files))))
    check_plan(plan, catalog)
    others = other_files(plan, catalog)
    weight_names = [f.name for f in plan.files]
    prog = make_progress(progress) if isinstance(progress, bool) else progress
    with open_sources(catalog, catalog.files) as sources:
        sha = plan_sha256(plan)
        state = prepare_destination(
            dst,
            [*weight_names, *others],
            sha,
            resume=resume,
            overwrite=overwrite,
            durable=durable,
            sources=identities(sources),
            source_where=source_label(catalog),
        )
        release_free_heap()  # what planning and the plan's checks freed is not carried along
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
        fault_point("unlink")
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


def identities(sources: SourceFiles) -> dict[str, SourceIdentity]:
    """Each opened shard's identity now (``execute.source_identity``)."""
    return {rel: st.identity() for rel, st in sorted(sources.stats.items())}


def source_label(catalog: Catalog) -> str:
    """The source as messages name it: the folder, or ``hf://org/name@rev`` of a remote one."""
    return catalog.store.label if catalog.store is not None else str(catalog.root)


def file_totals(plan: Plan) -> list[int]:
    """Tensor bytes of each planned output file (headers excluded), in plan order."""
    return [sum(tensor_bytes(t) for t in f.tensors) for f in plan.files]


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
    used = files_read(sources.catalog.tensors, plan.files)
    sources.check_unchanged(used)
    sources.check_content(used)  # an edit whose mtime was put back: never under a manifest
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


def check_plan(plan: Plan, catalog: Catalog) -> None:
    """Build every tensor's node tree once, to check the whole plan before anything is written
    (the trees are rebuilt per file while writing: memory stays flat on 100k-tensor plans).
    Errors come in plan order: a file's name, then a tensor name planned before, then its
    tensors' trees."""
    seen_files: set[str] = set()
    repeat = _first_repeat(plan)
    for i, f in enumerate(plan.files):
        _check_name(f.name, "output file")
        if not f.name.endswith(".safetensors"):
            raise InputError(f"{f.name}: output weight files must end in .safetensors; re-plan")
        if f.name in seen_files:
            raise InputError(f"{f.name}: planned twice; the plan is inconsistent, re-plan")
        seen_files.add(f.name)
        if repeat is not None and repeat[0] == i:
            raise InputError(repeat[1])
        for t in f.tensors:
            build_node(t, catalog.tensors)


def _first_repeat(plan: Plan) -> tuple[int, str] | None:
    """The first tensor, in plan order, whose ``(rank, name)`` an earlier one has (vllm-sharded
    repeats names across ranks): its file's number and the error, or None.

    Found on one 64-bit hash per tensor, sorted (a few arrays of 8 bytes a tensor; a name ->
    file dict over every tensor held ~170 bytes a tensor), and confirmed on the names of the
    tensors that share a hash: a collision is not a repeat.
    """
    files = plan.files
    starts = np.cumsum([0, *(len(f.tensors) for f in files)])

    def file_of(k: int) -> int:
        return int(np.searchsorted(starts, k, "right")) - 1

    hashes = np.empty(int(starts[-1]), np.int64)
    for i, f in enumerate(files):
        keys = (hash((f.rank, t.name)) for t in f.tensors)
        hashes[starts[i] : starts[i + 1]] = np.fromiter(keys, np.int64, starts[i + 1] - starts[i])
    order = np.argsort(hashes, kind="stable")  # equal hashes in plan order
    ordered = hashes[order]
    del hashes
    shared = ordered[1:][ordered[1:] == ordered[:-1]]  # hashes of more than one tensor
    first: tuple[int, str] | None = None  # (tensor number, error)
    for h in np.unique(shared).tolist():
        a, b = np.searchsorted(ordered, h, "left"), np.searchsorted(ordered, h, "right")
        seen: dict[tuple[int | None, str], int] = {}  # the tensors of one hash, by key
        for k in order[a:b].tolist():
            f = files[file_of(k)]
            key = (f.rank, f.tensors[k - int(starts[file_of(k)])].name)
            if key in seen:  # the first repeat of this hash: later ones come later in the plan
                if first is None or k < first[0]:
                    earlier = files[file_of(seen[key])].name
                    first = (k, f"{key[1]}: planned in {earlier} and {f.name}; re-plan")
                break
            seen[key] = k
    return None if first is None else (file_of(first[0]), first[1])


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
        inside_source(catalog.root, rel)  # a link out of SRC is refused, never followed
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

"""Array-job parts: ``ckpt convert SRC DST --part I/N`` on N machines, then ``--finalize``.

Each part writes only its share of the weight files (``split.split_files``: deterministic and
size-balanced) into the shared DST, and keeps its own record ``.ckpt-part-000I-of-000N.json``
(the plan fingerprint, the files it owns, each committed file's size, sha256 and mtime) the way
a single-host run keeps its journal: a killed part is continued with ``--part I/N --resume``
(journaled files are re-hashed and kept, the rest rewritten), whatever the other parts do.
Each record also holds the identity of every source shard the part reads
(``execute.source_identity``): a part, a resumed part and ``--finalize`` compare it with the
shard as it is now and stop with one line on a change, so parts of two versions of a source
never make one output.

``--finalize`` checks every part (all N records present, the same plan and split, every file
committed, on disk with the recorded size and mtime) and then writes the side files, config,
index and manifest with the single-host code: the output is byte-identical to one host's.

A part record (abridged)::

    {"format": "ckpt-part/1", "plan_sha256": "3b1f...", "part": 1, "parts": 4,
     "files": ["model-00002-of-00008.safetensors", "model-00007-of-00008.safetensors"],
     "done": {"model-00002-of-00008.safetensors": {"name": "...", "size": 4999999488,
              "sha256": "e3b0..."}},
     "mtimes": {"model-00002-of-00008.safetensors": 1764620000123456789}}
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from pydantic import BaseModel, Field

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute.destination import output_names
from checkpoint_tool.execute.distributed.split import split_files
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.file_run import FileRun
from checkpoint_tool.execute.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    FileRecord,
    Journal,
    plan_sha256,
    read_bookkeeping,
    read_manifest,
)
from checkpoint_tool.execute.open_source import open_sources
from checkpoint_tool.execute.pages import release_free_heap
from checkpoint_tool.execute.paths import check_apart
from checkpoint_tool.execute.progress import Progress, make_progress
from checkpoint_tool.execute.runner import (
    DEFAULT_MEMORY_BUDGET,
    ConvertReport,
    check_plan,
    chunk_size,
    file_totals,
    finish_output,
    identities,
    other_files,
    source_label,
)
from checkpoint_tool.execute.source_identity import SourceIdentity, check_same
from checkpoint_tool.execute.tree import files_read
from checkpoint_tool.execute.writer import fsync_dir, partial_name, write_bytes_atomic
from checkpoint_tool.plan.model import Plan

PART_FORMAT = "ckpt-part/1"
#: what to run when a source shard changed between parts (their files hold its old bytes)
_PARTS_FIX = "restore the shard, or remove DST and run every part again"
PART_RE = re.compile(r"^\.ckpt-part-(\d+)-of-(\d+)\.json$")


def part_name(part: int, parts: int) -> str:
    return f".ckpt-part-{part:04d}-of-{parts:04d}.json"


class PartRecord(BaseModel):
    """What one part owns and has committed (see the module docstring)."""

    format: str = PART_FORMAT
    plan_sha256: str
    part: int
    parts: int
    files: list[str]
    done: dict[str, FileRecord] = Field(default_factory=dict)
    mtimes: dict[str, int] = Field(default_factory=dict)
    #: the source shards this part reads, as it first saw them (``execute.source_identity``)
    sources: dict[str, SourceIdentity] = Field(default_factory=dict)


class PartReport(BaseModel):
    """What ``ckpt convert --part I/N`` did (``--format json`` prints it)."""

    dst: str
    part: int
    parts: int
    resumed: bool
    files: list[str]
    files_written: int
    files_kept: int
    bytes_written: int
    part_bytes: int
    total_size: int
    workers: int
    seconds: float
    durable: bool = True


def read_part(path: Path) -> PartRecord:
    rec = read_bookkeeping(path, PartRecord)
    if rec is None:
        raise OutputError(f"{path}: part record vanished while reading; rerun")
    return rec


def part_records(dst: Path) -> dict[str, PartRecord]:
    """Every part record in DST, by file name."""
    if not dst.is_dir():
        return {}
    return {p.name: read_part(p) for p in sorted(dst.iterdir()) if PART_RE.match(p.name)}


def _owned(name: str, planned: set[str]) -> bool:
    base = name[1:-8] if name.startswith(".") and name.endswith(".partial") else name
    return name in planned or PART_RE.match(base.rsplit("/", 1)[-1]) is not None


def _foreign(dst: Path, planned: list[str]) -> str | None:
    owned = output_names(planned) - {JOURNAL_NAME, MANIFEST_NAME}
    for p in sorted(dst.rglob("*")):
        rel = p.relative_to(dst).as_posix()
        if not p.is_dir() and not _owned(rel, owned):
            return rel
    return None


class _PartRun(FileRun):
    """A FileRun whose journal is this part's record (``part``, ``parts``, ``files`` set after
    construction)."""

    part: int
    parts: int
    files: list[str]

    def save_journal(self, journal: Journal) -> None:
        mtimes = {n: (self.dst / n).stat().st_mtime_ns for n in sorted(journal.done)}
        rec = PartRecord(
            plan_sha256=journal.plan_sha256,
            part=self.part,
            parts=self.parts,
            files=self.files,
            done=journal.done,
            mtimes=mtimes,
            sources=journal.sources,
        )
        data = json.dumps(rec.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
        write_bytes_atomic(self.dst / part_name(self.part, self.parts), data.encode(),
                           durable=self.durable)  # fmt: skip


def execute_part(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    part: int,
    parts: int,
    *,
    workers: int = 1,
    resume: bool = False,
    progress: bool | Progress = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    durable: bool = True,
) -> PartReport:
    """Write part ``part`` of ``parts`` of the plan's weight files into ``dst``."""
    t0 = time.monotonic()
    release_free_heap()  # what planning freed is not carried through the run
    dst = Path(dst)
    check_apart(catalog.root, dst)  # before anything: DST never is, holds or lies in SRC
    chunk = chunk_size(memory_budget, workers)
    check_plan(plan, catalog)
    others = other_files(plan, catalog)
    totals = file_totals(plan)
    mine = split_files(totals, parts)[part]
    names = [plan.files[i].name for i in mine]
    sha = plan_sha256(plan)
    needed = files_read(catalog.tensors, [plan.files[i] for i in mine])
    with open_sources(catalog, needed) as sources:
        now = identities(sources)
        journal, resumed = _prepare(
            dst, plan, others, sha, part, parts, names, resume, durable, now, catalog
        )
        release_free_heap()  # what planning and the plan's checks freed is not carried along
        prog = make_progress(progress) if isinstance(progress, bool) else progress
        run = _PartRun(plan, sources, dst, journal, chunk, prog, durable)
        run.part, run.parts, run.files = part, parts, names
        if not resumed:
            run.save_journal(journal)
        prog.start(sum(totals[i] for i in mine), len(mine))
        try:
            left = set(run.verify_done(workers))
            todo = [i for i in mine if i in left]
            run.save_journal(run.journal)
            run.write_files(todo, workers)
        finally:
            prog.close()
    return PartReport(
        dst=str(dst),
        part=part,
        parts=parts,
        resumed=resumed,
        files=names,
        files_written=len(todo),
        files_kept=len(mine) - len(todo),
        bytes_written=sum(totals[i] for i in todo),
        part_bytes=sum(totals[i] for i in mine),
        total_size=sum(totals),
        workers=workers,
        seconds=round(time.monotonic() - t0, 3),
        durable=durable,
    )


def _prepare(dst, plan, others, sha, part, parts, names, resume, durable, now, catalog):  # type: ignore[no-untyped-def]
    """Check DST for this part; the part's journal and whether it is resumed. ``now``: the
    identity of each shard this part reads, compared with what every part recorded."""
    if dst.exists() and not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a folder; choose a folder for the output")
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{dst}: cannot create the output folder ({exc.strerror})") from exc
    if (dst / MANIFEST_NAME).exists():
        raise OutputError(
            f"{dst}: already a finished ckpt output ({MANIFEST_NAME}); nothing for part "
            f"{part}/{parts} to do: choose another DST"
        )
    if (dst / JOURNAL_NAME).exists():
        raise OutputError(
            f"{dst}: holds a single-host ckpt run ({JOURNAL_NAME}); continue it with --resume "
            "(without --part), or choose another DST"
        )
    planned = [f.name for f in plan.files] + others
    foreign = _foreign(dst, planned)
    if foreign is not None:
        raise OutputError(
            f"{dst / foreign}: not written by ckpt parts of this plan; move it away or choose "
            "another DST"
        )
    own = part_name(part, parts)
    for fname, rec in part_records(dst).items():
        if rec.plan_sha256 != sha or rec.parts != parts or fname != part_name(rec.part, parts):
            raise OutputError(
                f"{dst / fname}: part {rec.part}/{rec.parts} of a different plan or split; give "
                "every part the same source, options and N, or choose another DST"
            )
        check_same(
            rec.sources, now, source_label(catalog), f"part {rec.part}/{parts} read it",
            _PARTS_FIX,
        )  # fmt: skip
    path = dst / own
    if path.exists():
        if not resume:
            raise OutputError(
                f"{path}: part {part}/{parts} already ran in DST; continue it with "
                f"--part {part}/{parts} --resume"
            )
        rec = read_part(path)
        if rec.files != names:
            raise OutputError(f"{path}: part {part}/{parts} owns other files; re-plan or new DST")
        for n in names:
            partial_name(dst / n).unlink(missing_ok=True)
            fault_point("unlink")
        sources = rec.sources or now  # a record of an older ckpt: record them now
        return Journal(plan_sha256=sha, planned=names, done=dict(rec.done), sources=sources), True
    return Journal(plan_sha256=sha, planned=names, sources=now), False


def finalize(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    *,
    progress: bool | Progress = True,
    hash_source: bool = False,
    durable: bool = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> ConvertReport:
    """Check every part in ``dst`` and write side files, config, index and manifest."""
    t0 = time.monotonic()
    dst = Path(dst)
    check_apart(catalog.root, dst)  # before anything: DST never is, holds or lies in SRC
    check_plan(plan, catalog)
    others = other_files(plan, catalog)
    totals = file_totals(plan)
    sha = plan_sha256(plan)
    manifest = read_manifest(dst) if dst.is_dir() else None
    if manifest is not None and manifest.plan_sha256 != sha:
        raise OutputError(f"{dst}: a finished output of a different plan; choose another DST")
    records = part_records(dst)
    if manifest is None:
        done = _check_parts(dst, plan, totals, sha, records, others)
    else:  # finished before: only the part records may be left
        done = {f.name: FileRecord(name=f.name, size=f.size, sha256=f.sha256)
                for f in manifest.files}  # fmt: skip
    prog = make_progress(progress) if isinstance(progress, bool) else progress
    journal = Journal(plan_sha256=sha, planned=[f.name for f in plan.files], done=done)
    with open_sources(catalog, catalog.files) as sources:
        now = identities(sources)
        for rec in records.values():  # every part read the source as it is now
            check_same(rec.sources, now, source_label(catalog), f"part {rec.part}/{rec.parts} "
                       "read it", _PARTS_FIX)  # fmt: skip
        run = FileRun(plan, sources, dst, journal, chunk_size(memory_budget, 1), prog, durable)
        weight_records = [done[f.name] for f in plan.files]
        try:
            manifest_sha = finish_output(run, others, sha, weight_records, hash_source)
        finally:
            prog.close()
    for fname in records:
        (dst / fname).unlink(missing_ok=True)
        fault_point("unlink")
    fsync_dir(dst, durable)
    return ConvertReport(
        dst=str(dst),
        resumed=False,
        files_written=0,
        files_kept=len(plan.files),
        bytes_written=0,
        tensor_count=plan.tensor_count(),
        total_size=sum(totals),
        other_files=sorted(others),
        dropped=len(plan.dropped),
        manifest_sha256=manifest_sha,
        workers=1,
        chunk_bytes=0,
        seconds=round(time.monotonic() - t0, 3),
        durable=durable,
    )


def _check_parts(dst, plan, totals, sha, records, others) -> dict[str, FileRecord]:  # type: ignore[no-untyped-def]
    """Every part present, of this plan and split, complete and untouched; all records."""
    if not records:
        raise OutputError(
            f"{dst}: no part records (.ckpt-part-*.json); run `ckpt convert SRC DST --part I/N` "
            "for every I first"
        )
    parts = next(iter(records.values())).parts
    for fname, rec in records.items():
        if rec.plan_sha256 != sha or rec.parts != parts or fname != part_name(rec.part, parts):
            raise OutputError(
                f"{dst / fname}: part {rec.part}/{rec.parts} does not match this plan or split "
                f"(N={parts}); rerun that part with the same source, options and N"
            )
    split = split_files(totals, parts)
    done: dict[str, FileRecord] = {}
    for p, members in enumerate(split):
        fname = part_name(p, parts)
        if fname not in records:
            raise OutputError(
                f"{dst / fname}: part {p}/{parts} is missing; run `ckpt convert SRC DST "
                f"--part {p}/{parts}` with the same options, then --finalize"
            )
        rec = records[fname]
        names = [plan.files[i].name for i in members]
        if rec.files != names:
            raise OutputError(f"{dst / fname}: part {p}/{parts} owns other files than this plan "
                              "gives it; rerun it with the same options")  # fmt: skip
        for n in names:
            if n not in rec.done:
                raise OutputError(
                    f"{dst / n}: not written yet by part {p}/{parts}; rerun it with "
                    f"--part {p}/{parts} --resume, then --finalize"
                )
            path = dst / n
            st = path.stat() if path.is_file() else None
            if st is None or st.st_size != rec.done[n].size or st.st_mtime_ns != rec.mtimes.get(n):
                raise OutputError(
                    f"{path}: missing or changed since part {p}/{parts} wrote it (size or mtime); "
                    f"rerun it with --part {p}/{parts} --resume, then --finalize"
                )
            done[n] = rec.done[n]
    foreign = _foreign(dst, [f.name for f in plan.files] + others)
    if foreign is not None:
        raise OutputError(f"{dst / foreign}: not written by ckpt; move it away, then --finalize")
    return done

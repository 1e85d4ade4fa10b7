"""What may happen to DST before a run: fresh, resume, or overwrite — and nothing else.

- DST missing or an empty folder: a fresh run.
- DST not empty, no flag: refused (one line saying which flag does what).
- ``--resume``: DST must hold a journal (an interrupted run) or a manifest (a finished run) of
  the *same plan*; otherwise refused. A manifest is turned back into a journal first, so the
  manifest only ever exists while the output is complete.
- ``--overwrite``: DST must be a previous ckpt output (manifest or journal) and hold **only** files
  that ckpt wrote or will write (names in the old manifest/journal or the new plan, and their
  ``.NAME.partial`` temporaries). Any other file makes ckpt refuse and name it: ckpt never deletes
  what it did not write. The old outputs are then removed before the new run starts, in an
  order that leaves DST recoverable at every instant: first the new journal, listing the old
  files still to remove (``remove``), then the manifest, then each old file, then the journal
  without the list. Killed anywhere in between, DST holds a journal that ``--overwrite`` and
  ``--resume`` (which finishes the removal) accept.
- A stale ``..ckpt-journal.json.partial`` alone (a run killed in its first journal write)
  counts as an empty DST.
- A resumed run compares the source shards with those the journal recorded
  (``execute.source_identity``): a changed shard is one line, nothing is touched.

Example::

    state = prepare_destination(dst, plan, plan_sha, resume=True, overwrite=False)
    state.journal.done   # {"model-00001-of-00003.safetensors": FileRecord(...), ...}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute.faults import fault_point
from checkpoint_tool.execute.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    Journal,
    read_journal,
    read_manifest,
    write_journal,
)
from checkpoint_tool.execute.source_identity import SourceIdentity, check_same
from checkpoint_tool.execute.writer import fsync_dir, partial_name


@dataclass
class DestinationState:
    journal: Journal
    resumed: bool


#: bookkeeping temporaries a kill can leave in an otherwise empty DST (a fresh run killed while
#: writing its first journal): they count as an empty folder
_STALE = {partial_name(Path(n)).as_posix() for n in (JOURNAL_NAME, MANIFEST_NAME)}


def output_names(planned: list[str]) -> set[str]:
    """Every name a run with these planned file names may leave in DST."""
    names = set(planned) | {MANIFEST_NAME, JOURNAL_NAME}
    return names | {partial_name(Path(n)).as_posix() for n in names}


def _listing(dst: Path) -> list[str]:
    return sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if not p.is_dir())


def _unlink(dst: Path, name: str) -> None:
    (dst / name).unlink(missing_ok=True)
    fault_point("unlink")


def prepare_destination(
    dst: Path,
    planned: list[str],
    plan_sha: str,
    *,
    resume: bool,
    overwrite: bool,
    durable: bool = True,
    sources: Mapping[str, SourceIdentity] | None = None,
    source_where: object = "",
) -> DestinationState:
    """Check DST against the flags, clean what may be cleaned, and return the run's journal.

    ``planned`` lists every file the run will write (weights, index, config, side files);
    ``sources`` the identity of each source shard now (a resumed run compares it with the
    journal's: ``execute.source_identity``), ``source_where`` names the source in messages.
    """
    if resume and overwrite:
        raise OutputError(f"{dst}: --resume and --overwrite exclude each other; pick one")
    if dst.exists() and not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a folder; choose a folder for the output")
    fresh = Journal(plan_sha256=plan_sha, planned=sorted(planned), sources=dict(sources or {}))
    listing = _listing(dst) if dst.exists() else []
    if not set(listing) - _STALE:
        _mkdir(dst)
        for name in listing:
            _unlink(dst, name)
        write_journal(dst, fresh, durable=durable)
        return DestinationState(fresh, resumed=False)
    manifest, journal = read_manifest(dst), read_journal(dst)
    if resume:
        return _resume(dst, manifest, journal, fresh, durable, source_where)
    if not overwrite:
        raise OutputError(
            f"{dst}: exists and is not empty; use --resume to continue an interrupted ckpt run, "
            "--overwrite to replace a previous ckpt output, or choose an empty folder"
        )
    if manifest is None and journal is None:
        raise OutputError(
            f"{dst}: not a ckpt output (no {MANIFEST_NAME} or {JOURNAL_NAME}); --overwrite only "
            "replaces ckpt outputs: empty the folder yourself or choose another"
        )
    owned = output_names(planned)
    old: set[str] = set()
    if manifest is not None:
        old |= manifest.owned_names()
    if journal is not None:
        old |= set(journal.planned) | set(journal.done) | set(journal.remove)
    owned |= output_names(sorted(old))
    foreign = [name for name in listing if name not in owned]
    if foreign:
        raise OutputError(
            f"{dst / foreign[0]}: not written by ckpt ({len(foreign)} such file(s) in DST); "
            "--overwrite never deletes files it did not write: move them away or choose another DST"
        )
    # first the record of what is ours to delete (a kill from here on leaves a journal that
    # --overwrite and --resume accept), then the manifest: DST is no finished output any more
    doomed = [MANIFEST_NAME, *(n for n in listing if n not in (MANIFEST_NAME, JOURNAL_NAME))]
    write_journal(dst, fresh.model_copy(update={"remove": doomed}), durable=durable)
    _clear(dst, doomed, durable)
    write_journal(dst, fresh, durable=durable)
    return DestinationState(fresh, resumed=False)


def _clear(dst: Path, names: list[str], durable: bool) -> None:
    """Delete ``names`` (the journal that lists them stays until they are gone)."""
    for name in names:
        _unlink(dst, name)
    fsync_dir(dst, durable)


def _resume(dst, manifest, journal, fresh, durable, source_where) -> DestinationState:  # type: ignore[no-untyped-def]
    plan_sha = fresh.plan_sha256
    if manifest is not None and manifest.plan_sha256 == plan_sha and journal is None:
        recovered = fresh.model_copy(
            update={"done": {f.name: f for f in [*manifest.files, *manifest.other_files]}}
        )
        write_journal(dst, recovered, durable=durable)
        _unlink(dst, MANIFEST_NAME)
        fsync_dir(dst, durable)
        return DestinationState(recovered, resumed=True)
    if journal is None:
        what = "a finished output of a different plan" if manifest else "no ckpt run to resume"
        raise OutputError(
            f"{dst}: --resume found {what}; rerun with the same source and options, or use "
            "--overwrite to start over"
        )
    if journal.plan_sha256 != plan_sha:
        raise OutputError(
            f"{dst}: the interrupted run used a different plan (source, recipe or options "
            "changed); rerun with the same options, or use --overwrite to start over"
        )
    check_same(
        journal.sources, fresh.sources, source_where, "the interrupted run started",
        "rerun with --overwrite (or restore the shard, then --resume)",
    )  # fmt: skip
    if manifest is not None:  # killed between the manifest and the journal's removal
        _unlink(dst, MANIFEST_NAME)
    if journal.remove:  # an --overwrite killed while it cleared the earlier output
        _clear(dst, journal.remove, durable)
        journal = journal.model_copy(update={"remove": []})
        write_journal(dst, journal, durable=durable)
    if not journal.sources and fresh.sources:  # a journal of an older ckpt: record them now
        journal = journal.model_copy(update={"sources": fresh.sources})
    for name in output_names(journal.planned):
        if name.endswith(".partial") and (dst / name).exists():
            _unlink(dst, name)
    return DestinationState(journal, resumed=True)


def _mkdir(dst: Path) -> None:
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{dst}: cannot create the output folder ({exc.strerror})") from exc
    if not os.access(dst, os.W_OK):
        raise OutputError(f"{dst}: not writable; choose a folder you can write to")

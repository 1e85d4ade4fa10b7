"""What may happen to DST before a run: fresh, resume, or overwrite — and nothing else.

- DST missing or an empty folder: a fresh run.
- DST not empty, no flag: refused (one line saying which flag does what).
- ``--resume``: DST must hold a journal (an interrupted run) or a manifest (a finished run) of
  the *same plan*; otherwise refused. A manifest is turned back into a journal first, so the
  manifest only ever exists while the output is complete.
- ``--overwrite``: DST must be a previous ckpt output (manifest or journal) and hold **only** files
  that ckpt wrote or will write (names in the old manifest/journal or the new plan, and their
  ``.NAME.partial`` temporaries). Any other file makes ckpt refuse and name it: ckpt never deletes
  what it did not write. The old outputs are then removed before the new run starts.

Example::

    state = prepare_destination(dst, plan, plan_sha, resume=True, overwrite=False)
    state.journal.done   # {"model-00001-of-00003.safetensors": FileRecord(...), ...}
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    Journal,
    read_journal,
    read_manifest,
    write_journal,
)
from checkpoint_tool.execute.writer import fsync_dir, partial_name


@dataclass
class DestinationState:
    journal: Journal
    resumed: bool


def output_names(planned: list[str]) -> set[str]:
    """Every name a run with these planned file names may leave in DST."""
    names = set(planned) | {MANIFEST_NAME, JOURNAL_NAME}
    return names | {partial_name(Path(n)).as_posix() for n in names}


def _listing(dst: Path) -> list[str]:
    return sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if not p.is_dir())


def prepare_destination(
    dst: Path,
    planned: list[str],
    plan_sha: str,
    *,
    resume: bool,
    overwrite: bool,
    durable: bool = True,
) -> DestinationState:
    """Check DST against the flags, clean what may be cleaned, and return the run's journal.

    ``planned`` lists every file the run will write (weights, index, config, side files).
    """
    if resume and overwrite:
        raise OutputError(f"{dst}: --resume and --overwrite exclude each other; pick one")
    if dst.exists() and not dst.is_dir():
        raise OutputError(f"{dst}: exists and is not a folder; choose a folder for the output")
    fresh = Journal(plan_sha256=plan_sha, planned=sorted(planned))
    if not dst.exists() or not _listing(dst):
        _mkdir(dst)
        write_journal(dst, fresh, durable=durable)
        return DestinationState(fresh, resumed=False)
    manifest, journal = read_manifest(dst), read_journal(dst)
    if resume:
        return _resume(dst, manifest, journal, plan_sha, fresh, durable)
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
        old |= set(journal.planned) | set(journal.done)
    owned |= output_names(sorted(old))
    foreign = [name for name in _listing(dst) if name not in owned]
    if foreign:
        raise OutputError(
            f"{dst / foreign[0]}: not written by ckpt ({len(foreign)} such file(s) in DST); "
            "--overwrite never deletes files it did not write: move them away or choose another DST"
        )
    # the manifest goes first: from here on DST is not a finished output
    for name in [MANIFEST_NAME, *sorted(n for n in _listing(dst) if n != MANIFEST_NAME)]:
        path = dst / name
        if path.exists():
            path.unlink()
    fsync_dir(dst, durable)
    write_journal(dst, fresh, durable=durable)
    return DestinationState(fresh, resumed=False)


def _resume(dst, manifest, journal, plan_sha, fresh, durable) -> DestinationState:  # type: ignore[no-untyped-def]
    if manifest is not None and manifest.plan_sha256 == plan_sha:
        recovered = Journal(
            plan_sha256=plan_sha,
            planned=fresh.planned,
            done={f.name: f for f in [*manifest.files, *manifest.other_files]},
        )
        write_journal(dst, recovered, durable=durable)
        (dst / MANIFEST_NAME).unlink()
        fsync_dir(dst, durable)
        return DestinationState(recovered, resumed=True)
    if journal is None or manifest is not None:
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
    for name in output_names(journal.planned):
        if name.endswith(".partial") and (dst / name).exists():
            (dst / name).unlink()
    return DestinationState(journal, resumed=True)


def _mkdir(dst: Path) -> None:
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{dst}: cannot create the output folder ({exc.strerror})") from exc
    if not os.access(dst, os.W_OK):
        raise OutputError(f"{dst}: not writable; choose a folder you can write to")

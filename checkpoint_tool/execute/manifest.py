"""``ckpt-manifest.json`` (written last: its presence means the output is complete) and the
per-file journal ``.ckpt-journal.json`` that makes ``--resume`` possible.

Both are deterministic: no timestamps, no worker counts, no host names; JSON with sorted keys.
The same source, plan and options give the same manifest bytes. Source shards are identified by
size and the sha256 of their header (cheap even for 700 GB); ``--hash-source`` adds the sha256
of every byte.

Example (abridged)::

    {"ckpt_version": "0.1.0", "format": "ckpt-manifest/1", "plan_sha256": "3b1f...",
     "source": "/models/R1", "source_revision": null, "source_hashing": "header",
     "source_files": [{"name": "model-00001-of-00163.safetensors", "size": 5234567890,
                       "header_sha256": "9ac0...", "sha256": null}],
     "files": [{"name": "model-00001-of-00004.safetensors", "size": 4999999488,
                "sha256": "e3b0...", "tensors": 812}],
     "other_files": [{"name": "config.json", ...}, {"name": "model.safetensors.index.json", ...}],
     "recipe": "deepseek-v3", "options": {"tp": 2, ...}, "total_size": 4999870000, ...}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute.source_identity import SourceIdentity
from checkpoint_tool.execute.writer import write_bytes_atomic
from checkpoint_tool.plan.model import DroppedTensor, Plan, PlanOptions
from checkpoint_tool.plan.serialize import plan_sha256 as plan_sha256  # the plan's fingerprint

MANIFEST_NAME = "ckpt-manifest.json"
JOURNAL_NAME = ".ckpt-journal.json"
MANIFEST_FORMAT = "ckpt-manifest/1"
#: a bookkeeping record type (``read_bookkeeping``)
M = TypeVar("M", bound=BaseModel)


def plan_matches(plan: Plan, recorded: str) -> bool:
    """Whether ``recorded`` (a manifest's ``plan_sha256``) fingerprints ``plan``: its hash now,
    or as ckpt hashed plans before the plan had its own JSON encoding
    (``plan.legacy_hash``), so an output an earlier ckpt wrote still verifies."""
    if plan_sha256(plan) == recorded:
        return True
    from checkpoint_tool.plan.legacy_hash import legacy_plan_sha256

    return legacy_plan_sha256(plan) == recorded


class FileRecord(BaseModel):
    """A file of the output: name relative to DST, size in bytes, sha256 hex."""

    name: str
    size: int
    sha256: str


class WeightFileRecord(FileRecord):
    tensors: int


class SourceFileRecord(BaseModel):
    """A source shard: size and header hash always; full sha256 only with ``--hash-source``."""

    name: str
    size: int
    header_sha256: str
    sha256: str | None = None


class Manifest(BaseModel):
    format: str = MANIFEST_FORMAT
    ckpt_version: str
    plan_sha256: str
    source: str
    source_revision: str | None = None
    source_hashing: str = "header"  # "header" | "full"
    source_files: list[SourceFileRecord]
    recipe: str
    options: PlanOptions
    files: list[WeightFileRecord]
    other_files: list[FileRecord] = Field(default_factory=list)
    tensor_count: int
    total_size: int
    dropped: list[DroppedTensor] = Field(default_factory=list)

    def owned_names(self) -> set[str]:
        return {f.name for f in self.files} | {f.name for f in self.other_files} | {MANIFEST_NAME}


class Journal(BaseModel):
    """Progress of an unfinished run: the plan it belongs to, each committed file, the source
    shards as the run first saw them (``execute.source_identity``) and, while ``--overwrite``
    clears an earlier output, the files of it still to remove (``execute.destination``)."""

    plan_sha256: str
    planned: list[str]
    done: dict[str, FileRecord] = Field(default_factory=dict)
    sources: dict[str, SourceIdentity] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)


def manifest_bytes(manifest: Manifest) -> bytes:
    return (json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()


def write_manifest(dst: Path, manifest: Manifest, *, durable: bool = True) -> str:
    return write_bytes_atomic(dst / MANIFEST_NAME, manifest_bytes(manifest), durable=durable)


def read_manifest(dst: Path) -> Manifest | None:
    """The manifest of a finished output, or None if there is none."""
    return read_bookkeeping(Path(dst) / MANIFEST_NAME, Manifest)


def read_journal(dst: Path) -> Journal | None:
    return read_bookkeeping(Path(dst) / JOURNAL_NAME, Journal)


def write_journal(dst: Path, journal: Journal, *, durable: bool = True) -> None:
    data = json.dumps(journal.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
    write_bytes_atomic(dst / JOURNAL_NAME, data.encode(), durable=durable)


def read_bookkeeping(path: Path, model: type[M]) -> M | None:
    """A JSON record ckpt wrote into DST (manifest, journal, part record), or None if absent."""
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise OutputError(
            f"{path}: unreadable ckpt bookkeeping file ({first}); remove DST or use --overwrite"
        ) from exc

"""Checksums against ``ckpt-manifest.json`` (the executor's manifest), and ``--write-manifest``.

The manifest format belongs to ``checkpoint_tool.execute.manifest`` (``Manifest``,
``read_manifest``); validate only reads it, or writes one through the same model for a
checkpoint ckpt did not convert (provenance fields then say so: ``recipe: "none"``,
``source: "ckpt validate --write-manifest"``). Files are hashed by streaming (8 MiB reads).

Example finding::

    Issue(severity="error", rule="checksums", file="model-00002-of-00002.safetensors",
          message="sha256 e3b0c442... differs from the manifest's 9f86d081...; the file changed "
                  "after conversion: re-run the conversion or re-download it")
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from checkpoint_tool.errors import CkptError
from checkpoint_tool.report import Issue, Severity
from checkpoint_tool.validate.context import Unavailable, ValidationContext
from checkpoint_tool.validate.report import CheckResult, CheckStatus

HASH_CHUNK = 8 * 1024 * 1024
#: side files whose changes alter what an engine loads: unlisted ones are worth a warning
LOAD_RELEVANT = (".json", ".safetensors", ".py", ".jinja", ".model", ".tiktoken")


def sha256_file(path: Path) -> str:
    """Streaming sha256 of one file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def manifest_path(ctx: ValidationContext) -> Path | None:
    """``--manifest PATH`` when given, else ``ckpt-manifest.json`` beside the shards if present."""
    from checkpoint_tool.execute.manifest import MANIFEST_NAME

    if ctx.options.manifest is not None:
        return Path(ctx.options.manifest)
    default = ctx.root / MANIFEST_NAME
    return default if default.exists() else None


def load_manifest(path: Path):
    """Parse a manifest with the executor's model; ``CkptError`` if it is not one."""
    from pydantic import ValidationError

    from checkpoint_tool.execute.manifest import Manifest

    try:
        return Manifest.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise CkptError(f"{path}: not a readable ckpt manifest ({first})") from exc


def _finding(file: str, message: str, severity: Severity = "error") -> Issue:
    """A ``checksums`` finding about ``file``, e.g. ``_finding("config.json", "listed in the
    manifest but missing; ...")``."""
    return Issue(severity=severity, rule="checksums", file=file, message=message)


def check_checksums(ctx: ValidationContext) -> list[Issue]:
    """Every file the manifest lists exists with its recorded size and sha256."""
    try:
        from checkpoint_tool.execute.manifest import MANIFEST_NAME
    except ImportError as exc:
        raise Unavailable(f"the manifest module is not available ({exc})") from None
    if ctx.options.write_manifest:
        raise Unavailable("--write-manifest: a new manifest is written instead of checked")
    if ctx.store is not None:
        raise Unavailable(
            "remote source: checksums need every byte; validate a downloaded copy, or convert "
            "with --hash-source (checked against the hub's LFS sha256)"
        )
    path = manifest_path(ctx)
    if path is None:
        raise Unavailable(f"no {MANIFEST_NAME} (pass --manifest PATH, or --write-manifest)")
    shown = path.name if path.parent == ctx.root else str(path)
    try:
        manifest = load_manifest(path)
    except CkptError as exc:
        return [_finding(shown, exc.message)]
    out: list[Issue] = []
    listed = [*manifest.files, *manifest.other_files]
    for rec in sorted(listed, key=lambda r: r.name):
        out.extend(_check_record(ctx, rec))
    names = {r.name for r in listed} | {MANIFEST_NAME}
    for p in sorted(ctx.root.iterdir()):
        if not p.is_file() or p.name.startswith(".") or p.name in names:
            continue
        if p.suffix == ".safetensors":
            out.append(
                _finding(
                    p.name, "shard is not listed in the manifest; it was added after conversion"
                )
            )
        elif p.suffix in LOAD_RELEVANT:
            out.append(
                _finding(
                    p.name,
                    "file is not covered by the manifest (added after conversion?)",
                    severity="warning",
                )
            )
    return out


def _check_record(ctx: ValidationContext, rec) -> list[Issue]:
    from checkpoint_tool.catalog.paths import safe_relative

    rel = safe_relative(rec.name)
    if rel is None:
        return [
            _finding(
                str(rec.name), "manifest entry points outside the checkpoint folder; refusing it"
            )
        ]
    path = ctx.root / rel
    if not path.is_file():
        return [
            _finding(
                rel, "listed in the manifest but missing; copy it back or re-run the conversion"
            )
        ]
    size = path.stat().st_size
    if size != rec.size:
        return [
            _finding(
                rel,
                f"size {size} differs from the manifest's {rec.size}; the file changed "
                "or is incomplete: re-run the conversion or re-download it",
            )
        ]
    digest = sha256_file(path)
    if digest != rec.sha256:
        return [
            _finding(
                rel,
                f"sha256 {digest[:16]}... differs from the manifest's {rec.sha256[:16]}...; "
                "the file changed after conversion: re-run the conversion or re-download it",
            )
        ]
    return []


def build_manifest(ctx: ValidationContext):
    """A ``Manifest`` describing the checkpoint as it is now (for ``--write-manifest``)."""
    from checkpoint_tool import __version__
    from checkpoint_tool.execute.manifest import (
        MANIFEST_NAME,
        FileRecord,
        Manifest,
        WeightFileRecord,
    )
    from checkpoint_tool.plan.model import PlanOptions

    shards = []
    for rel in ctx.counted_files:
        path = ctx.root / rel
        shards.append(
            WeightFileRecord(
                name=rel,
                size=path.stat().st_size,
                sha256=sha256_file(path),
                tensors=len(ctx.scans[rel].names),
            )
        )
    others = []
    shard_names = set(ctx.counted_files)
    for p in sorted(ctx.root.rglob("*")):
        rel = p.relative_to(ctx.root).as_posix()
        hidden = any(part.startswith(".") for part in rel.split("/"))
        if not p.is_file() or hidden or rel in shard_names or rel == MANIFEST_NAME:
            continue
        others.append(FileRecord(name=rel, size=p.stat().st_size, sha256=sha256_file(p)))
    return Manifest(
        ckpt_version=__version__,
        plan_sha256="",
        source="ckpt validate --write-manifest",
        source_hashing="none",
        source_files=[],
        recipe="none",
        options=PlanOptions(),
        files=shards,
        other_files=others,
        tensor_count=len(ctx.all_names),
        total_size=sum(ctx.scans[rel].tensor_bytes for rel in ctx.counted_files),
    )


def write_manifest_if_clean(
    ctx: ValidationContext, results: list[CheckResult]
) -> tuple[str | None, CheckResult]:
    """Write ``ckpt-manifest.json`` when no check failed; the result says what happened."""
    from checkpoint_tool.execute.manifest import MANIFEST_NAME, write_manifest

    failed = [r.id for r in results if r.status is CheckStatus.failed]
    title = "write ckpt-manifest.json for the validated checkpoint (--write-manifest)"
    if ctx.store is not None:
        failed = ["remote source: a manifest is written next to local files only"]
    if failed:
        issue = Issue(
            severity="error",
            rule="write_manifest",
            file=MANIFEST_NAME,
            message=f"not written: the checkpoint failed {', '.join(failed)}; a manifest must "
            "not certify a broken checkpoint",
        )
        return None, CheckResult(
            id="write_manifest",
            category="checksums",
            title=title,
            status=CheckStatus.failed,
            findings=[issue],
        )
    write_manifest(ctx.root, build_manifest(ctx))
    return str(ctx.root / MANIFEST_NAME), CheckResult(
        id="write_manifest", category="checksums", title=title, status=CheckStatus.passed
    )

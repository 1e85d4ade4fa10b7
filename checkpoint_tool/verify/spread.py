"""``ckpt verify`` spread like ``convert``: the lossless check of a share of the output files.

- ``--part I/N``: part I checks its files of the same size-balanced split as ``convert --part``
  (``split.split_files``); part 0 also checks config.json, the index and the side files. It
  prints a part report (``--format json``: ``{"format": "ckpt-verify-part/1", ...}``);
- ``--merge R0.json R1.json ...``: all N part reports (same plan, every part once) -> one
  ``VerifyReport`` with exit code 0 / 1, as a single-host lossless check would give;
- ``--executor ray``: one Ray task per output file, merged on the driver.

The numeric check samples a few layers and is run once, on one machine (``--no-lossless``).

Example::

    ckpt verify /shared/r1 -s /models/R1 --no-numeric --part 3/8 --format json > v3.json
    ckpt verify /shared/r1 -s /models/R1 --merge v*.json
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.errors import UsageError
from checkpoint_tool.execute.distributed.ray_pool import MAX_RETRIES, connect
from checkpoint_tool.execute.distributed.split import split_files
from checkpoint_tool.execute.progress import NullProgress
from checkpoint_tool.plan.model import Plan
from checkpoint_tool.verify.lossless import LosslessChecker, stored_nbytes
from checkpoint_tool.verify.replan import (
    check_source_identity,
    ckpt_meta,
    rebuild_plan,
    require_manifest,
)
from checkpoint_tool.verify.report import LosslessReport, NumericReport, VerifyReport
from checkpoint_tool.verify.requant import check_errors, recorded

VERIFY_PART_FORMAT = "ckpt-verify-part/1"


class VerifyPartReport(BaseModel):
    """The lossless check of one part (``ckpt verify --part I/N --format json``)."""

    format: str = VERIFY_PART_FORMAT
    dst: str
    source: str
    part: int
    parts: int
    plan_sha256: str
    plan_matches_manifest: bool
    files: list[str]
    lossless: LosslessReport
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 1 if self.lossless.status == "failed" else 0


def _prepare(dst: Path, source: str) -> tuple[Plan, Catalog, str, bool]:
    """The plan convert executed (with its requantized shared experts, when DST records any)."""
    manifest = require_manifest(dst)
    catalog = open_catalog(source, headers_only=False)
    check_source_identity(manifest, catalog)
    plan, same = rebuild_plan(manifest, catalog, requant=recorded(ckpt_meta(dst)))
    return plan, catalog, manifest.plan_sha256, same


def _check_requant(report: LosslessReport, catalog: Catalog, dst: Path) -> None:
    """The recorded requantization errors recomputed from the source (part 0 / the driver, as
    a single-host verify does once): a gap fails ``report`` with the reason."""
    notes, ok = check_errors(catalog, ckpt_meta(dst))
    if not ok:
        report.status = "failed"
        report.reason = "; ".join(n for n in notes if "recorded by convert" in n)


def check_files(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    indexes: list[int],
    *,
    others: bool,
    budget: int,
    max_listed: int,
) -> LosslessReport:
    """The lossless check of plan files ``indexes`` (and of the non-weight files if
    ``others``), with ``verify.lossless``'s checker."""
    t0 = time.monotonic()
    checker = LosslessChecker(plan, catalog, dst, budget, max_listed, NullProgress())
    try:
        checker.check_files([plan.files[i] for i in indexes])
        if others:
            checker.check_others()
    finally:
        checker.close()
    report = checker.report
    report.status = "failed" if report.mismatch_count else "passed"
    report.seconds = round(time.monotonic() - t0, 3)
    return report


def verify_part(
    dst: Path, source: str, part: int, parts: int, *, budget: int, max_listed: int
) -> VerifyPartReport:
    t0 = time.monotonic()
    plan, catalog, sha, same = _prepare(Path(dst), source)
    sizes = [sum(stored_nbytes(t) for t in f.tensors) for f in plan.files]
    mine = split_files(sizes, parts)[part]
    lossless = check_files(plan, catalog, Path(dst), mine, others=part == 0, budget=budget,
                           max_listed=max_listed)  # fmt: skip
    if part == 0:
        _check_requant(lossless, catalog, Path(dst))
    lossless.plan_sha256 = sha
    return VerifyPartReport(
        dst=str(dst), source=str(source), part=part, parts=parts, plan_sha256=sha,
        plan_matches_manifest=same, files=[plan.files[i].name for i in mine], lossless=lossless,
        seconds=round(time.monotonic() - t0, 3),
    )  # fmt: skip


def merge_reports(paths: list[Path]) -> VerifyReport:
    """N part reports -> one report; a missing, repeated or foreign part is a usage error."""
    reports: list[VerifyPartReport] = []
    for p in paths:
        try:
            reports.append(VerifyPartReport.model_validate_json(Path(p).read_bytes()))
        except (OSError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise UsageError(f"{p}: not a `ckpt verify --part` report ({first})") from exc
    if not reports:
        raise UsageError("--merge: give the part reports of every part")
    n, sha = reports[0].parts, reports[0].plan_sha256
    seen: dict[int, Path] = {}
    for p, r in zip(paths, reports, strict=True):
        if r.parts != n or r.plan_sha256 != sha:
            raise UsageError(f"{p}: part {r.part}/{r.parts} of another plan or split than "
                             f"{paths[0]}; merge the reports of one run")  # fmt: skip
        if r.part in seen:
            raise UsageError(f"{p}: part {r.part}/{n} given twice (also {seen[r.part]})")
        seen[r.part] = p
    missing = [i for i in range(n) if i not in seen]
    if missing:
        raise UsageError(f"--merge: part {missing[0]}/{n} is missing ({len(missing)} missing); "
                         f"run `ckpt verify DST -s SRC --part {missing[0]}/{n}` and add it")  # fmt: skip
    ordered = sorted(reports, key=lambda r: r.part)
    return _combine(ordered[0].dst, ordered[0].source, [r.lossless for r in ordered], sha,
                    all(r.plan_matches_manifest for r in ordered), max(r.seconds for r in ordered))  # fmt: skip


def _combine(dst: str, source: str, parts: list[LosslessReport], sha: str, same: bool,
             seconds: float, max_listed: int = 50) -> VerifyReport:  # fmt: skip
    merged = LosslessReport(status="passed", plan_sha256=sha, plan_matches_manifest=same)
    for r in parts:
        merged.files_checked += r.files_checked
        merged.tensors_checked += r.tensors_checked
        merged.tensors_padded += r.tensors_padded
        merged.bytes_compared += r.bytes_compared
        merged.mismatches_not_listed += r.mismatches_not_listed
        for m in r.mismatches:
            if len(merged.mismatches) < max_listed:
                merged.mismatches.append(m)
            else:
                merged.mismatches_not_listed += 1
    # weight files first, then config/index/side files, as one host lists them
    merged.mismatches.sort(key=lambda m: (m.kind == "file_differs", m.file))
    failed = [r for r in parts if r.status == "failed"]
    merged.status = "failed" if merged.mismatch_count or failed else "passed"
    merged.reason = next((r.reason for r in failed if r.reason), None)
    merged.seconds = round(seconds, 3)
    numeric = NumericReport(status="skipped", reason="spread lossless check: run the numeric "
                            "check once with --no-lossless")  # fmt: skip
    return VerifyReport(
        dst=dst, source=source, passed=merged.status != "failed", lossless=merged,
        numeric=numeric, seconds=round(seconds, 3),
    )  # fmt: skip


def _file_task(plan: Plan, catalog: Catalog, dst: str, i: int, budget: int,
               max_listed: int) -> LosslessReport:  # fmt: skip
    """In a Ray worker: the lossless check of plan file ``i``."""
    return check_files(plan, catalog, Path(dst), [i], others=False, budget=budget,
                       max_listed=max_listed)  # fmt: skip


def verify_ray(
    dst: Path, source: str, *, address: str | None, tasks: int, budget: int, max_listed: int
) -> VerifyReport:
    """One Ray task per output file; the non-weight files are checked on the driver."""
    t0 = time.monotonic()
    plan, catalog, sha, same = _prepare(Path(dst), source)
    ray = connect(address)
    remote = ray.remote(_file_task).options(max_retries=MAX_RETRIES, num_cpus=1)
    refs = [ray.put(plan), ray.put(catalog)]
    limit = tasks or int(ray.cluster_resources().get("CPU", 1))
    results: dict[int, LosslessReport] = {}
    pending = list(range(len(plan.files)))
    flying: dict[object, int] = {}  # Ray object ref -> file index
    while pending or flying:
        while pending and len(flying) < max(1, limit):
            i = pending.pop(0)
            flying[remote.remote(*refs, str(dst), i, budget, max_listed)] = i
        ready, _ = ray.wait(list(flying), num_returns=1, timeout=1.0)
        for ref in ready:
            results[flying.pop(ref)] = ray.get(ref)
    others = check_files(plan, catalog, Path(dst), [], others=True, budget=budget,
                         max_listed=max_listed)  # fmt: skip
    _check_requant(others, catalog, Path(dst))
    parts = [results[i] for i in range(len(plan.files))] + [others]
    return _combine(str(dst), str(source), parts, sha, same, time.monotonic() - t0, max_listed)


def check_options(numeric: bool, lossless: bool) -> None:
    if numeric or not lossless:
        raise UsageError(
            "--part/--merge/--executor ray spread the lossless check: add --no-numeric, and run "
            "the numeric check once with --no-lossless"
        )

"""``verify_checkpoint``: the lossless and numeric checks of a converted checkpoint, one report.

Order: open the source (headers), read DST's manifest; lossless (needs the manifest: source
identity, plan rebuilt from the recorded recipe/options, bytes compared); numeric (sampled MoE
layers, TP size from ``--tp`` or the manifest); the report says ``passed`` unless a section
failed.

Example::

    report = verify_checkpoint(Path("/out/model"), "/models/quark-mxfp4",
                               VerifyOptions(tokens=16, backend="torch"))
    report.passed, report.lossless.tensors_checked, [r.layer for r in report.numeric.layers]
    # (True, 213, [1])
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from checkpoint_tool.catalog import Catalog, open_catalog
from checkpoint_tool.errors import UsageError
from checkpoint_tool.execute.manifest import Manifest, read_manifest
from checkpoint_tool.execute.progress import Progress
from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.verify.lossless import DEFAULT_BUDGET, DEFAULT_MAX_LISTED, check_lossless
from checkpoint_tool.verify.numeric import (
    DEFAULT_TOKENS,
    LayerProgress,
    NumericOptions,
    check_numeric,
)
from checkpoint_tool.verify.replan import (
    check_source_identity,
    ckpt_meta,
    rebuild_plan,
    require_manifest,
)
from checkpoint_tool.verify.report import (
    NO_NUMERIC,
    LosslessReport,
    NumericReport,
    VerifyReport,
    overall,
)
from checkpoint_tool.verify.sampling import ConvertedView
from checkpoint_tool.verify.sharded import ShardedView

#: layouts whose converted MoE layers the numeric check can read
NUMERIC_LAYOUTS = ("hf", "vllm-sharded")


class VerifyOptions(BaseModel):
    lossless: bool = True
    numeric: bool = True
    #: numeric layers: "sample" / None (one per policy), "all", or layer numbers
    layers: list[int] | Literal["all", "sample"] | None = None
    #: time budget of the numeric check beyond the policy sample (``--layers all``)
    max_seconds: float | None = None
    tokens: int = DEFAULT_TOKENS
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["triton", "torch"] = "triton"
    #: TP size whose per-rank partial sums the numeric check runs (None: the manifest's)
    tp: int | None = None
    memory_budget: int = DEFAULT_BUDGET
    max_mismatches: int = DEFAULT_MAX_LISTED
    #: numeric layers that cannot run (unsupported routing / format) do not fail the run
    allow_skipped: bool = False
    #: threads of the lossless check (None: the usable cores, at most 8)
    workers: int | None = None


def verify_checkpoint(
    dst: str | Path,
    source: str,
    options: VerifyOptions | None = None,
    *,
    progress: Progress | None = None,
    layer_progress: LayerProgress | None = None,
) -> VerifyReport:
    """Check converted checkpoint ``dst`` against ``source`` (see the module docstring);
    ``progress`` sees the lossless bytes, ``layer_progress`` the numeric layers."""
    t0 = time.monotonic()
    options = options or VerifyOptions()
    dst = Path(dst)
    if not dst.is_dir():
        raise UsageError(f"{dst}: not a folder; give the output folder of `ckpt convert`")
    if not options.lossless and not options.numeric:
        raise UsageError("--no-lossless and --no-numeric together leave nothing to check")
    notes: list[str] = []
    manifest = read_manifest(dst)
    layout = _layout(manifest, dst)
    if options.numeric and layout not in NUMERIC_LAYOUTS:
        raise UsageError(
            f"{dst}: the numeric check is not supported yet for layout {layout!r} (it reads "
            f"{', '.join(NUMERIC_LAYOUTS)} outputs); run with --no-numeric for the lossless check"
        )
    src_catalog = open_catalog(source, headers_only=False)

    if options.lossless:
        manifest = require_manifest(dst)
        check_source_identity(manifest, src_catalog)
        from checkpoint_tool.verify.requant import check_errors, recorded

        requant = recorded(ckpt_meta(dst))
        plan, same = rebuild_plan(manifest, src_catalog, requant=requant)
        lossless = check_lossless(
            plan,
            src_catalog,
            dst,
            budget=options.memory_budget,
            max_listed=options.max_mismatches,
            progress=progress,
            workers=options.workers,
        )
        lossless.plan_matches_manifest = same
        if requant is not None:  # requantized shared experts: their errors recomputed
            requant_notes, requant_ok = check_errors(src_catalog, ckpt_meta(dst))
            notes += requant_notes
            if not requant_ok:
                lossless.status = "failed"
        lossless.plan_sha256 = manifest.plan_sha256
        checked = lossless.tensors_checked
        if checked and lossless.mismatch_count > checked // 2:
            notes.append(
                f"{lossless.mismatch_count} of {checked} tensors differ: is --source the "
                "checkpoint DST was converted from? (the manifest identifies source shards by "
                "size and header; a source with the same layout and other values passes that)"
            )
        if not same:
            notes.append(
                "the plan rebuilt from the source differs from the one convert executed "
                f"(ckpt {manifest.ckpt_version} wrote DST; recipe or planner changed since): "
                "bytes were compared against the rebuilt plan"
            )
    else:
        lossless = LosslessReport(status="skipped", reason="--no-lossless")
        if manifest is not None:
            try:
                check_source_identity(manifest, src_catalog)
            except UsageError as exc:
                notes.append(f"warning: {exc.message}")

    if options.numeric:
        numeric = _numeric(dst, src_catalog, manifest, options, layout, layer_progress)
        numeric.layout = layout
    else:
        numeric = NumericReport(status="skipped", reason=NO_NUMERIC, layout=layout)
    return VerifyReport(
        dst=str(dst),
        source=str(source),
        passed=overall(lossless, numeric),
        lossless=lossless,
        numeric=numeric,
        notes=notes,
        seconds=round(time.monotonic() - t0, 3),
    )


def _numeric(
    dst: Path,
    src_catalog: Catalog,
    manifest: Manifest | None,
    options: VerifyOptions,
    layout: str,
    progress: LayerProgress | None = None,
) -> NumericReport:
    src = CheckpointView(src_catalog, semantics="producer")
    out: ConvertedView
    if layout == "vllm-sharded":
        ranks = _recorded_tp(manifest, ckpt_meta(dst))
        if options.tp is not None and options.tp != ranks:
            raise UsageError(
                f"--tp {options.tp}: {dst} is a vllm-sharded output for {ranks} rank(s); its "
                "numeric check runs exactly those ranks (omit --tp)"
            )
        out = ShardedView.open(dst, tp=ranks)
        tp = ranks
    else:
        out = CheckpointView(open_catalog(dst, headers_only=False), semantics="vllm")
        tp = options.tp or _recorded_tp(manifest, out.ckpt_metadata())
    return check_numeric(src, out, NumericOptions.of(options), tp=tp, progress=progress)


def _recorded_tp(manifest: Manifest | None, meta: dict[str, Any]) -> int:
    if manifest is not None:
        return manifest.options.tp
    tp = meta.get("tp")
    return int(tp) if isinstance(tp, int) and tp > 0 else 1


def _layout(manifest: Manifest | None, dst: Path) -> str:
    if manifest is not None:
        return manifest.options.layout
    if any(dst.glob("model-rank-*.safetensors")):
        return "vllm-sharded"
    return "hf"

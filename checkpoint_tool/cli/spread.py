"""Run ``ckpt convert`` / ``ckpt verify`` spread over processes or machines.

The options are declared in ``cli.dist_options``; here they pick the path and run it:
``--part I/N`` (an array-job part), ``--finalize``, ``--executor ray``, and for verify
``--merge`` of the part reports. Each run returns its report and the human renderer for it.

Example::

    if convert_spread(executor, part, finalize):
        report, human = run_convert(plan, catalog, dst, executor=executor, part="0/4", ...)
        emit(report, fmt, human=human)
"""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from checkpoint_tool.cli.dist_options import ExecutorOption
from checkpoint_tool.cli.render import render_convert, render_part, render_verify_part
from checkpoint_tool.errors import UsageError
from checkpoint_tool.execute.distributed import parts
from checkpoint_tool.execute.distributed.ray_pool import RayPool
from checkpoint_tool.execute.distributed.split import parse_part
from checkpoint_tool.execute.runner import execute_plan

if TYPE_CHECKING:
    from rich.console import Console

    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.plan.model import Plan
    from checkpoint_tool.verify.report import VerifyReport
    from checkpoint_tool.verify.spread import VerifyPartReport

    SpreadReport = VerifyReport | VerifyPartReport

#: draws a report on a rich console (``cli.render``; each takes its own report type)
Renderer = Callable[[Any, "Console"], None]


def convert_spread(executor: ExecutorOption, part: str | None, finalize: bool) -> bool:
    """Whether the distributed path runs (otherwise the single-host one does)."""
    return executor is not ExecutorOption.threads or part is not None or finalize


def run_convert(
    plan: Plan,
    catalog: Catalog,
    dst: Path,
    *,
    executor: ExecutorOption,
    ray_address: str | None,
    ray_tasks: int,
    part: str | None,
    finalize: bool,
    workers: int,
    resume: bool,
    overwrite: bool,
    progress: bool,
    memory_budget: int,
    hash_source: bool,
    durable: bool,
) -> tuple[BaseModel, Renderer]:
    """Run the distributed variant; the report and its human renderer."""
    ray = executor is ExecutorOption.ray
    if sum([ray, part is not None, finalize]) > 1:
        raise UsageError("--executor ray, --part and --finalize exclude each other; pick one")
    if (part is not None or finalize) and overwrite:
        raise UsageError("--overwrite does not combine with --part/--finalize; empty DST instead")
    report: BaseModel
    if part is not None:
        i, n = parse_part(part)
        report = parts.execute_part(
            plan, catalog, dst, i, n, workers=workers, resume=resume, progress=progress,
            memory_budget=memory_budget, durable=durable,
        )  # fmt: skip
        return report, render_part
    if finalize:
        if resume:
            raise UsageError("--finalize resumes by itself; drop --resume")
        report = parts.finalize(
            plan, catalog, dst, progress=progress, hash_source=hash_source, durable=durable,
            memory_budget=memory_budget,
        )  # fmt: skip
        return report, render_convert
    pool = RayPool(ray_address, ray_tasks, memory_budget)
    report = execute_plan(
        plan, catalog, dst, resume=resume, overwrite=overwrite, progress=progress,
        memory_budget=memory_budget, hash_source=hash_source, durable=durable, pool=pool,
    )  # fmt: skip
    return report, render_convert


def verify_spread(executor: ExecutorOption, part: str | None, merge: list[str] | None) -> bool:
    """Whether ``ckpt verify`` takes the distributed path."""
    return executor is not ExecutorOption.threads or part is not None or bool(merge)


def run_verify(
    dst: Path,
    source: str,
    *,
    executor: ExecutorOption,
    ray_address: str | None,
    ray_tasks: int,
    part: str | None,
    merge: list[str] | None,
    lossless: bool,
    numeric: bool,
    memory_budget: int,
    max_mismatches: int,
) -> tuple[SpreadReport, Renderer]:
    """``ckpt verify`` spread: the report and its human renderer."""
    # verify's package imports torch (the numeric check): not at ``ckpt convert``'s start
    from checkpoint_tool.verify import spread as vs
    from checkpoint_tool.verify.render import render_human

    if sum([executor is ExecutorOption.ray, part is not None, bool(merge)]) > 1:
        raise UsageError("--executor ray, --part and --merge exclude each other; pick one")
    if merge:
        paths = [Path(q) for m in merge for q in (sorted(glob.glob(m)) or [m])]
        return vs.merge_reports(paths), render_human
    vs.check_options(numeric, lossless)
    if part is not None:
        i, n = parse_part(part)
        part_report = vs.verify_part(
            dst, source, i, n, budget=memory_budget, max_listed=max_mismatches
        )
        return part_report, render_verify_part
    report = vs.verify_ray(dst, source, address=ray_address, tasks=ray_tasks,
                           budget=memory_budget, max_listed=max_mismatches)  # fmt: skip
    return report, render_human

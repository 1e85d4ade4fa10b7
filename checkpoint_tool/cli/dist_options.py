"""Options that spread one ``ckpt convert`` over many processes or machines (declared once).

``--executor ray [--ray-address A] [--ray-tasks N]``: each output file a Ray task.
``--part I/N``: write part I of N (an array-job task); ``--finalize``: check all N parts, write
the index and manifest. See ``checkpoint_tool.execute.distributed`` and docs/convert.md.

Example::

    ckpt convert /models/R1 /shared/r1 --tp 8 --part $SLURM_ARRAY_TASK_ID/16
    ckpt convert /models/R1 /shared/r1 --tp 8 --finalize
    ckpt convert /models/R1 /shared/r1 --tp 8 --executor ray --ray-address auto
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from checkpoint_tool.errors import UsageError


class ExecutorOption(str, Enum):
    """Who writes the output files: threads of this process, or Ray tasks."""

    threads = "threads"
    ray = "ray"


ExecutorOpt = Annotated[
    ExecutorOption,
    typer.Option(
        "--executor",
        help="threads: --workers threads of this process; ray: one Ray task per output file "
        "(needs the ray extra: pip install checkpoint-tool\\[ray]; SRC and DST on a file system "
        "every node sees).",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="Ray cluster to join (e.g. auto, ray://head:10001); default: local."
    ),
]
RayTasksOpt = Annotated[
    int,
    typer.Option(
        "--ray-tasks", min=0, help="Ray tasks in flight (0: the cluster's CPUs); shares the budget."
    ),
]
PartOpt = Annotated[
    str | None,
    typer.Option(
        "--part",
        help="Write only part I of N of the output files (I from 0, e.g. "
        "$SLURM_ARRAY_TASK_ID/8), then run --finalize once all parts are done.",
    ),
]
FinalizeOpt = Annotated[
    bool,
    typer.Option(
        "--finalize", help="Check every --part in DST, then write the index and manifest."
    ),
]


MergeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--merge",
        help="Merge `ckpt verify --part` JSON reports (repeat it, or give a quoted glob such as "
        "'v*.json') into one report and exit code; nothing is re-read.",
    ),
]


def spread(executor: ExecutorOption, part: str | None, finalize: bool) -> bool:
    """Whether the distributed path runs (otherwise the single-host one does)."""
    return executor is not ExecutorOption.threads or part is not None or finalize


def run(
    plan: Any,
    catalog: Any,
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
) -> tuple[Any, Any]:
    """Run the distributed variant; the report and its human renderer."""
    from checkpoint_tool.cli.convert import render_report
    from checkpoint_tool.execute import execute_plan
    from checkpoint_tool.execute.distributed import parts
    from checkpoint_tool.execute.distributed.split import parse_part

    ray = executor is ExecutorOption.ray
    if sum([ray, part is not None, finalize]) > 1:
        raise UsageError("--executor ray, --part and --finalize exclude each other; pick one")
    if (part is not None or finalize) and overwrite:
        raise UsageError("--overwrite does not combine with --part/--finalize; empty DST instead")
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
        return report, render_report
    from checkpoint_tool.execute.distributed.ray_pool import RayPool

    pool = RayPool(ray_address, ray_tasks, memory_budget)
    report = execute_plan(
        plan, catalog, dst, resume=resume, overwrite=overwrite, progress=progress,
        memory_budget=memory_budget, hash_source=hash_source, durable=durable, pool=pool,
    )  # fmt: skip
    return report, render_report


def render_part(report: Any, console: Any) -> None:
    from checkpoint_tool.execute.progress import human_bytes

    console.print(
        f"[bold green]part {report.part}/{report.parts}[/] of {report.dst}: "
        f"{report.files_written} file(s) written ({human_bytes(report.bytes_written)}, "
        f"{report.seconds:.1f} s)"
        + (f", {report.files_kept} verified and kept" if report.files_kept else "")
        + f"; this part holds {len(report.files)} file(s), {human_bytes(report.part_bytes)} "
        f"of {human_bytes(report.total_size)}. When every part is done: ckpt convert SRC DST "
        "(same options) --finalize"
    )


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
) -> tuple[Any, Any]:
    """``ckpt verify`` spread: the report and its human renderer."""
    import glob

    from checkpoint_tool.execute.distributed.split import parse_part
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
        report = vs.verify_part(dst, source, i, n, budget=memory_budget, max_listed=max_mismatches)
        return report, render_verify_part
    report = vs.verify_ray(dst, source, address=ray_address, tasks=ray_tasks,
                           budget=memory_budget, max_listed=max_mismatches)  # fmt: skip
    return report, render_human


def render_verify_part(report: Any, console: Any) -> None:
    ll = report.lossless
    mark = "[bold red]FAILED[/]" if ll.status == "failed" else "[bold green]passed[/]"
    console.print(
        f"verify part {report.part}/{report.parts} of {report.dst}: lossless {mark} "
        f"({ll.files_checked} file(s), {ll.tensors_checked} tensors, {ll.mismatch_count} "
        "mismatch(es)); merge every part's --format json report with --merge"
    )
    for m in ll.mismatches:
        console.print(f"  {m.file} {m.tensor}: {m.kind}: {m.message}")

"""``ckpt convert SRC DST``: plan the conversion, then stream it into DST.

catalog (headers only) -> recipe (``--recipe`` or auto) -> policy for ``--tp``/``--fse`` -> plan
(``checkpoint_tool.plan.build.plan_for_catalog``) -> ``execute_plan``. ``--dry-run`` prints the
plan (the same rendering as ``ckpt plan``) and touches nothing. Exit 0 on success, 2 on any user
error (one line on stderr: bad source, DST not empty, disk full, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from checkpoint_tool.cli import dist_options as dist
from checkpoint_tool.cli.options import (
    FormatOpt,
    FseOpt,
    LayersOpt,
    LayoutOpt,
    MaxErrorOpt,
    MaxShardSizeOpt,
    MemoryBudgetOpt,
    OverwriteOpt,
    PadToOpt,
    ProgressOpt,
    RecipeOpt,
    RequantizeLayersOpt,
    RequantizeSharedOpt,
    SourceArg,
    TargetOpt,
    TpOpt,
)
from checkpoint_tool.cli.output import emit

HELP = (
    "Convert a checkpoint for vLLM: rename tensors (recipe), fuse shared experts into routed "
    "slots where safe (FSE), pad the expert intermediate dim for --tp, reshard into files of "
    "--max-shard-size, write the index, config.json, side files and ckpt-manifest.json (last). "
    "Streams with bounded memory; atomic and resumable.\n\n"
    "Examples:\n\n"
    "  ckpt convert /models/quark-mxfp4 /out/model --tp 2\n\n"
    "  ckpt convert ./ckpt ./out --tp 8 --target vllm-0.33-rocm-aiter-fse   # FSE slots\n\n"
    "  ckpt convert ./ckpt ./out --recipe deepseek-v3 --fse off --max-shard-size 2GB\n\n"
    "  ckpt convert ./ckpt ./out --tp 4 --dry-run\n\n"
    "  ckpt convert ./ckpt ./out --tp 4 --resume        # after an interruption\n\n"
    "  ckpt convert /models/R1 ./r1-l3-4 --layers 3,4 --workers 2 --format json\n\n"
    "  ckpt convert ./ckpt ./out --no-fsync            # cp-like speed, not power-loss safe\n\n"
    "  ckpt convert ./ckpt /shared/out --part 0/4      # array job: parts 0..3, then --finalize\n\n"
    "  ckpt convert ./ckpt /shared/out --executor ray --ray-address auto"
)


def render_report(report, console: Console) -> None:  # type: ignore[no-untyped-def]
    from checkpoint_tool.execute.progress import human_bytes

    rate = report.bytes_written / report.seconds if report.seconds else 0.0
    console.print(
        f"[bold green]converted[/] {report.dst}: {report.files_written} file(s) written "
        f"({human_bytes(report.bytes_written)}, {human_bytes(rate)}/s, {report.seconds:.1f} s, "
        f"{report.workers} worker(s))"
        + (f", {report.files_kept} verified and kept" if report.files_kept else "")
        + ("" if report.durable else ", not fsynced (--no-fsync)")
    )
    console.print(
        f"{report.tensor_count} tensors, {human_bytes(report.total_size)} of tensor data, "
        f"{len(report.other_files)} other file(s), {report.dropped} dropped by rule; "
        f"ckpt-manifest.json sha256 {report.manifest_sha256[:16]}…"
    )


def render_target(plan, console: Console) -> None:  # type: ignore[no-untyped-def]
    """``for vllm-0.33 (stock vLLM 0.33 on CUDA ...): serve as is`` / the settings it needs."""
    from checkpoint_tool.plan.build import serve_settings, target_of

    target = target_of(plan.options)
    fse_on = sorted(k for k, v in plan.fse_layers.items() if v)
    settings = serve_settings(target, fse_on)
    need = (
        f"serve with {' '.join(settings)}"
        if settings
        else "no engine settings needed"
        if not fse_on or target.fuses
        else "does NOT load there (shared experts written as routed slots; see the note)"
    )
    fused = (
        f"shared experts fused on MoE layer(s) {fse_on}" if fse_on else "no fused shared experts"
    )
    console.print(f"target {target.name} ({target.description}): {fused}; {need}")


def register(app: typer.Typer) -> None:
    @app.command("convert", help=HELP)
    def convert(
        ctx: typer.Context,
        src: SourceArg,
        dst: Annotated[Path, typer.Argument(help="Output folder (created; must be empty).")],
        recipe: RecipeOpt = None,
        # the plan options: PlanOptions fields of the same name (session.plan_options)
        tp: TpOpt = 1,
        fse: FseOpt = "auto",
        target: TargetOpt = None,
        pad_to: PadToOpt = None,
        max_shard_size: MaxShardSizeOpt = "5GB",  # type: ignore[assignment]  # parsed to int
        layers: LayersOpt = None,
        requantize_shared: RequantizeSharedOpt = None,
        requantize_layers: RequantizeLayersOpt = None,
        max_error: MaxErrorOpt = None,
        layout: LayoutOpt = "hf",
        workers: Annotated[
            int, typer.Option("--workers", "-j", min=1, help="Output files written in parallel.")
        ] = 1,
        memory_budget: MemoryBudgetOpt = "1GiB",  # type: ignore[assignment]  # parsed to int
        resume: Annotated[
            bool, typer.Option("--resume", help="Continue an interrupted run into DST.")
        ] = False,
        overwrite: OverwriteOpt = False,
        hash_source: Annotated[
            bool,
            typer.Option(
                "--hash-source",
                help="Record the sha256 of every source shard in the "
                "manifest (reads the whole source once more).",
            ),
        ] = False,
        fsync: Annotated[
            bool,
            typer.Option(
                "--fsync/--no-fsync",
                help="fsync every file before renaming it (default). --no-fsync is like cp: "
                "files still appear under their final names only when complete and the manifest "
                "is still last (a killed run is safe, --resume works), but a power loss or OS "
                "crash may lose the last seconds of writes. Same output bytes either way.",
            ),
        ] = True,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print the plan; write nothing.")
        ] = False,
        progress: ProgressOpt = True,
        fmt: FormatOpt = "human",
        # issue 16: spread over processes / machines (cli/dist_options.py)
        executor: dist.ExecutorOpt = dist.ExecutorOption.threads,
        ray_address: dist.RayAddressOpt = None,
        ray_tasks: dist.RayTasksOpt = 0,
        part: dist.PartOpt = None,
        finalize: dist.FinalizeOpt = False,
    ) -> None:
        from checkpoint_tool.cli.plan import render_plan
        from checkpoint_tool.cli.session import open_plan, plan_options
        from checkpoint_tool.execute import execute_plan
        from checkpoint_tool.quant.requant.select import RequantRequest

        requant = RequantRequest.parse(requantize_shared, requantize_layers, max_error)
        catalog, plan = open_plan(
            src, plan_options(ctx), recipe=recipe, headers_only=False, requant=requant
        )
        if dry_run:  # the plan as `ckpt plan` prints it (json: the whole plan)
            emit(plan, fmt, human=render_plan)
            return
        if dist.spread(executor, part, finalize):  # issue 16: Ray tasks, --part, --finalize
            report, human = dist.run(
                plan, catalog, dst, executor=executor, ray_address=ray_address,
                ray_tasks=ray_tasks, part=part, finalize=finalize, workers=workers, resume=resume,
                overwrite=overwrite, progress=progress, memory_budget=memory_budget,
                hash_source=hash_source, durable=fsync,
            )  # fmt: skip
            emit(report, fmt, human=human)
            return
        report = execute_plan(
            plan,
            catalog,
            dst,
            workers=workers,
            resume=resume,
            overwrite=overwrite,
            progress=progress,
            memory_budget=memory_budget,
            hash_source=hash_source,
            durable=fsync,
        )

        def human(r, console: Console) -> None:  # type: ignore[no-untyped-def]
            render_report(r, console)
            render_target(plan, console)

        emit(report, fmt, human=human)  # type: ignore[arg-type]

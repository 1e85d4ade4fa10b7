"""``ckpt convert SRC DST``: plan the conversion, then stream it into DST.

catalog (headers only) -> recipe (``--recipe`` or auto) -> policy for ``--tp``/``--fse`` -> plan
(``checkpoint_tool.plan.build.plan_for_catalog``) -> ``execute_plan``. ``--dry-run`` prints the
plan (the same rendering as ``ckpt plan``) and touches nothing. Exit 0 on success, 2 on any user
error (one line on stderr: bad source, DST not empty, disk full, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from checkpoint_tool.cli import dist_options as dist
from checkpoint_tool.cli import session
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
from checkpoint_tool.cli.render import render_convert, render_plan, render_target
from checkpoint_tool.cli.spread import convert_spread, run_convert
from checkpoint_tool.execute.runner import execute_plan

if TYPE_CHECKING:
    from rich.console import Console

    from checkpoint_tool.execute.runner import ConvertReport

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
        # spread over processes / machines (cli/dist_options.py, cli/spread.py)
        executor: dist.ExecutorOpt = dist.ExecutorOption.threads,
        ray_address: dist.RayAddressOpt = None,
        ray_tasks: dist.RayTasksOpt = 0,
        part: dist.PartOpt = None,
        finalize: dist.FinalizeOpt = False,
    ) -> None:
        from checkpoint_tool.requant.select import RequantRequest

        requant = RequantRequest.parse(requantize_shared, requantize_layers, max_error)
        catalog, plan = session.open_plan(
            src, session.plan_options(ctx), recipe=recipe, headers_only=False, requant=requant
        )
        if dry_run:  # the plan as `ckpt plan` prints it (json: the whole plan)
            emit(plan, fmt, human=render_plan)
            return
        if convert_spread(executor, part, finalize):  # Ray tasks, --part, --finalize
            spread_report, spread_human = run_convert(
                plan, catalog, dst, executor=executor, ray_address=ray_address,
                ray_tasks=ray_tasks, part=part, finalize=finalize, workers=workers, resume=resume,
                overwrite=overwrite, progress=progress, memory_budget=memory_budget,
                hash_source=hash_source, durable=fsync,
            )  # fmt: skip
            emit(spread_report, fmt, human=spread_human)
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

        def human(r: ConvertReport, console: Console) -> None:
            render_convert(r, console)
            render_target(plan, console)

        emit(report, fmt, human=human)

"""``ckpt plan SRC``: what a conversion would do, without writing anything.

Human output is the plan's summary (tensors kept/renamed/redirected/padded/dropped, FSE
layers, padded sizes, files, bytes per rank, peak memory, notes); ``--format json`` prints the
whole plan (every output tensor as pieces of source tensors), the input of ``ckpt convert``.
``cli.render.render_plan`` draws it, for ``ckpt convert --dry-run`` too.
"""

from __future__ import annotations

import typer

from checkpoint_tool.cli import session
from checkpoint_tool.cli.options import (
    FormatOpt,
    FseOpt,
    LayersOpt,
    LayoutOpt,
    MaxErrorOpt,
    MaxShardSizeOpt,
    PadToOpt,
    RecipeOpt,
    RequantizeLayersOpt,
    RequantizeSharedOpt,
    SourceArg,
    TargetOpt,
    TpOpt,
)
from checkpoint_tool.cli.output import emit

HELP = (
    "Show what a conversion would do (renames, FSE redirection, padding, files), reading only "
    "headers and config.json; nothing is written. --format json prints the whole plan, the "
    "input of `ckpt convert`.\n\n"
    "Examples:\n\n  ckpt plan /models/DeepSeek-R1 --tp 8\n\n"
    "  ckpt plan ./quark-hybrid --tp 2 --fse off --max-shard-size 2GB\n\n"
    "  ckpt plan ./quark-hybrid --tp 2 --target vllm-per-layer-fse\n\n"
    "  ckpt plan ./ckpt --layers 3,4 --format json > plan.json"
)


def register(app: typer.Typer) -> None:
    @app.command("plan", help=HELP)
    def plan_cmd(
        ctx: typer.Context,
        src: SourceArg,
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
        fmt: FormatOpt = "human",
    ) -> None:
        from checkpoint_tool.requant.select import RequantRequest

        requant = RequantRequest.parse(requantize_shared, requantize_layers, max_error)
        plan = session.open_plan(src, session.plan_options(ctx), recipe=recipe, requant=requant)[1]
        if fmt == "human":  # rich and the renderers: only for a table on the terminal
            from checkpoint_tool.cli.render import render_plan

            emit(plan, fmt, human=render_plan)
        else:
            emit(plan, fmt)

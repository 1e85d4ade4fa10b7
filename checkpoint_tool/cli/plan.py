"""``ckpt plan SRC``: what a conversion would do, without writing anything.

Human output is the plan's summary (tensors kept/renamed/redirected/padded/dropped, FSE
layers, padded sizes, files, bytes per rank, peak memory, notes); ``--format json`` prints the
whole plan (every output tensor as pieces of source tensors), the input of ``ckpt convert``.
``render_plan`` is shared with ``ckpt convert --dry-run``.
"""

from __future__ import annotations

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

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
from checkpoint_tool.plan.model import Plan

_MAX_FILE_ROWS = 12

HELP = (
    "Show what a conversion would do (renames, FSE redirection, padding, files), reading only "
    "headers and config.json; nothing is written. --format json prints the whole plan, the "
    "input of `ckpt convert`.\n\n"
    "Examples:\n\n  ckpt plan /models/DeepSeek-R1 --tp 8\n\n"
    "  ckpt plan ./quark-hybrid --tp 2 --fse off --max-shard-size 2GB\n\n"
    "  ckpt plan ./quark-hybrid --tp 2 --target vllm-per-layer-fse\n\n"
    "  ckpt plan ./ckpt --layers 3,4 --format json > plan.json"
)


def _size(n: int) -> str:
    for unit, div in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def _layers_label(layers: list[int]) -> str:
    if not layers:
        return ""
    return str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


def render_plan(plan: BaseModel, console: Console) -> None:
    """The human summary of a plan (``ckpt plan``, ``ckpt convert --dry-run``)."""
    assert isinstance(plan, Plan)
    s = plan.summary
    o = plan.options
    console.print(
        f"[bold]plan[/] {plan.source} -> layout {o.layout}, tp {o.tp}, fse {o.fse}, "
        f"recipe {plan.recipe}"
    )
    if s is None:
        console.print(f"{plan.tensor_count()} tensors in {len(plan.files)} file(s)")
        return
    t = Table(title="tensors", title_justify="left", show_header=True)
    cols = ["source", "output", "kept", "renamed", "redirected (FSE)"]
    vals = [s.source_tensors, s.output_tensors, s.kept, s.renamed, s.redirected]
    if s.unfused:
        cols.append("unfused (3-D)")
        vals.append(s.unfused)
    cols += ["padded", "dropped"]
    vals += [s.padded, s.dropped]
    for col in cols:
        t.add_column(col, justify="right")
    t.add_row(*(str(v) for v in vals))
    console.print(t)
    if s.fse_enabled_layers or s.fse_disabled_layers:
        console.print(
            f"fused shared experts: written as routed slots on MoE layer(s) "
            f"{s.fse_enabled_layers}; kept shared on {s.fse_disabled_layers}"
        )
    if s.moe_intermediate_size is not None:
        if s.padded_intermediate_size != s.moe_intermediate_size:
            per_rank = (s.padded_intermediate_size or 0) // max(1, o.tp)
            console.print(
                f"expert intermediate size: {s.moe_intermediate_size} -> "
                f"{s.padded_intermediate_size} (zero padding; {per_rank} per rank, a multiple "
                f"of {s.pad_to})"
            )
        else:
            console.print(
                f"expert intermediate size: {s.moe_intermediate_size} (no padding needed for "
                f"tp {o.tp})"
            )
    if s.shared_intermediate_size is not None:
        console.print(
            f"shared expert intermediate size: {s.shared_intermediate_size} -> "
            f"{s.padded_shared_intermediate_size}"
        )
    files = Table(title=f"{len(s.files)} output file(s)", title_justify="left")
    for col, justify in (
        ("file", "left"),
        ("tensors", "right"),
        ("size", "right"),
        ("layers", "left"),
    ):
        files.add_column(col, justify=justify)  # type: ignore[arg-type]
    for f in s.files[:_MAX_FILE_ROWS]:
        files.add_row(f.name, str(f.tensors), _size(f.nbytes), _layers_label(f.layers))
    if len(s.files) > _MAX_FILE_ROWS:
        rest = s.files[_MAX_FILE_ROWS:]
        files.add_row(
            f"... {len(rest)} more",
            str(sum(f.tensors for f in rest)),
            _size(sum(f.nbytes for f in rest)),
            "",
        )
    console.print(files)
    per_rank = s.bytes_per_rank[0] if s.bytes_per_rank else 0
    console.print(
        f"bytes: source {_size(s.source_bytes)}, output {_size(s.output_bytes)}; each of "
        f"{len(s.bytes_per_rank)} rank(s) loads about {_size(per_rank)} (experts split, the "
        "rest counted whole)"
    )
    console.print(
        f"peak memory per worker: about {_size(s.peak_memory_bytes)} "
        f"({s.peak_memory_tensor}; tensors are streamed one at a time)"
    )
    if s.dropped_by_rule:
        dropped = ", ".join(f"{rule}: {n}" for rule, n in s.dropped_by_rule.items())
        console.print(f"dropped (by rule): {dropped}")
        for d in plan.dropped[:5]:
            console.print(f"  [dim]{d.name}: {d.reason} ({d.rule})[/]")
        if len(plan.dropped) > 5:
            console.print(f"  [dim]... {len(plan.dropped) - 5} more (see --format json)[/]")
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")
    from checkpoint_tool.cli.convert import render_target

    render_target(plan, console)
    console.print("[dim]nothing was written; `ckpt convert` runs this plan[/]")


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
        from checkpoint_tool.cli.session import open_plan, paused_gc, plan_options
        from checkpoint_tool.quant.requant.select import RequantRequest

        requant = RequantRequest.parse(requantize_shared, requantize_layers, max_error)
        _, plan = open_plan(src, plan_options(ctx), recipe=recipe, requant=requant)
        with paused_gc():  # ~10^6 live plan objects: no collector walks while 60 MB are written
            emit(plan, fmt, human=render_plan)

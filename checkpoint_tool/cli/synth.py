"""``ckpt synth``: write a small, format-faithful synthetic checkpoint (or a sparse full-size one).

Example::

    ckpt synth --list
    ckpt synth quark-hybrid ./hybrid --seed 1
    ckpt synth deepseek-v3-fp8 ./r1 --sparse            # real DeepSeek-R1 layout, 163 shards
    ckpt synth moe-1024x80-mxfp4 ./big --sparse         # scale model: 486,737 tensors
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from checkpoint_tool.cli.options import FormatOpt, OverwriteOpt
from checkpoint_tool.cli.output import emit, stderr_console
from checkpoint_tool.errors import UsageError

#: outputs at least this large get a progress bar
PROGRESS_MIN_BYTES = 64 << 20

HELP = (
    "Write a synthetic checkpoint that is format-faithful to a real producer "
    "(config.json, quantization_config, tensor names, dtypes, shapes, encodings, "
    "shards + index, side files), with random but validly encoded data.\n\n"
    "Examples:\n\n"
    "  ckpt synth --list\n\n"
    "  ckpt synth quark-hybrid ./hybrid --seed 1\n\n"
    "  ckpt synth quark-mxfp4 ./m --experts 16 --moe-intermediate 96 --shard-size 200KB\n\n"
    "  ckpt synth deepseek-v3-fp8 ./r1 --sparse\n\n"
    "  ckpt synth moe-1024x80-mxfp4 ./big --sparse   (scale model: 1024 experts x 80 layers, "
    "486,737 tensors)"
)

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?")


def parse_size(text: str) -> int:
    """``"5GB"`` -> 5_000_000_000, ``"512MiB"`` -> 536_870_912, ``"1000"`` -> 1000."""
    m = _SIZE.fullmatch(text.strip().lower())
    if not m:
        raise UsageError(f"--shard-size {text!r}: give bytes, e.g. 1000000, 500MB or 4GiB")
    number, prefix, binary = m.groups()
    power = "kmgt".index(prefix) + 1 if prefix else 0
    return int(float(number) * (1024 if binary else 1000) ** power)


class DataMode(str, Enum):
    quantize = "quantize"
    codes = "codes"


class PresetRow(BaseModel):
    name: str
    family: str
    producer: str
    fused_experts: bool
    summary: str


class PresetList(BaseModel):
    presets: list[PresetRow]


class SynthResult(BaseModel):
    preset: str
    path: str
    shards: int
    tensors: int
    tensor_bytes: int
    sparse: bool
    seed: int


def _preset_list() -> PresetList:
    from checkpoint_tool.synth import PRESETS

    return PresetList(
        presets=[
            PresetRow(
                name=p.name,
                family=p.family,
                producer=p.producer,
                fused_experts=p.supports_fused_experts,
                summary=p.summary,
            )
            for p in PRESETS.values()
        ]
    )


def _render_list(report: BaseModel, console: Console) -> None:
    assert isinstance(report, PresetList)
    table = Table(title="ckpt synth presets", show_lines=False)
    for col in ("preset", "family", "producer", "summary"):
        table.add_column(col, overflow="fold")
    for p in report.presets:
        table.add_row(p.name, p.family, p.producer, p.summary)
    console.print(table)
    console.print(
        "[dim]Sizes: tiny by default (--layers/--experts/--hidden/...); --sparse writes the "
        "real full-size layout with empty data regions.[/]"
    )


def _render_result(report: BaseModel, console: Console) -> None:
    assert isinstance(report, SynthResult)
    kind = "sparse (data regions are holes)" if report.sparse else f"seed {report.seed}"
    console.print(
        f"[green]wrote[/] {report.preset} -> {report.path}: {report.tensors} tensors in "
        f"{report.shards} shard(s), {report.tensor_bytes / 1e6:.1f} MB of tensor data, {kind}"
    )


def register(app: typer.Typer) -> None:
    @app.command("synth", help=HELP)
    def synth(
        preset: Annotated[
            str | None, typer.Argument(help="Preset name (see --list).", show_default=False)
        ] = None,
        dst: Annotated[
            Path | None, typer.Argument(help="Destination folder.", show_default=False)
        ] = None,
        list_presets: Annotated[
            bool, typer.Option("--list", help="List the presets and exit.")
        ] = False,
        layers: Annotated[
            int | None, typer.Option("--layers", help="Number of main decoder layers.")
        ] = None,
        experts: Annotated[
            int | None, typer.Option("--experts", help="Routed experts per MoE layer.")
        ] = None,
        shared_experts: Annotated[
            int | None,
            typer.Option(
                "--shared-experts",
                help="Shared experts (DeepSeek: one shared MLP of width N x moe-intermediate).",
            ),
        ] = None,
        hidden: Annotated[int | None, typer.Option("--hidden", help="Hidden size.")] = None,
        moe_intermediate: Annotated[
            int | None,
            typer.Option("--moe-intermediate", help="Expert intermediate size (padding cases)."),
        ] = None,
        shard_size: Annotated[
            str | None,
            typer.Option("--shard-size", help="Greedy shard budget, e.g. 200KB, 5GB, 1000000."),
        ] = None,
        shards: Annotated[
            int | None, typer.Option("--shards", help="Split into this many shards instead.")
        ] = None,
        seed: Annotated[
            int, typer.Option("--seed", help="Random seed (same seed, same bytes).")
        ] = 0,
        sparse: Annotated[
            bool,
            typer.Option(
                "--sparse",
                help="Full-size real layout, data regions left as sparse holes (seconds).",
            ),
        ] = False,
        fused_experts: Annotated[
            bool,
            typer.Option(
                "--fused-experts",
                help="Quark presets: routed experts as BF16 fused 3-D gate_up_proj/down_proj.",
            ),
        ] = False,
        overwrite: OverwriteOpt = False,
        data: Annotated[
            DataMode,
            typer.Option(
                "--data",
                help="quantize: N(0,0.02) floats through the codecs; codes: random valid "
                "codes drawn directly (much faster, for large benchmark data).",
            ),
        ] = DataMode.quantize,
        fmt: FormatOpt = "human",
    ) -> None:
        if list_presets:
            emit(_preset_list(), fmt, human=_render_list)
            return
        if preset is None or dst is None:
            raise UsageError("give a PRESET and a DST folder (or --list to see the presets)")
        from checkpoint_tool.synth.builder import build_layout, write_layout

        opts = dict(
            num_layers=layers,
            n_routed=experts,
            n_shared=shared_experts,
            hidden=hidden,
            moe_intermediate=moe_intermediate,
        )
        layout = build_layout(preset, sparse=sparse, fused_experts=fused_experts, **opts)
        total = sum(s.nbytes for s in layout.tensors)
        show = not sparse and total >= PROGRESS_MIN_BYTES
        with _progress(show) as (bar, task):

            def tick(done: int, _total: int, name: str) -> None:
                if bar is not None:
                    bar.update(task, completed=done, total=_total, file=name)

            out = write_layout(
                layout,
                dst,
                seed=seed,
                shard_size=parse_size(shard_size) if shard_size is not None else None,
                shards=shards,
                sparse=sparse,
                overwrite=overwrite,
                data=data.value,
                progress=tick,
            )
        emit(
            SynthResult(
                preset=preset,
                path=str(out.path),
                shards=out.shards,
                tensors=out.tensors,
                tensor_bytes=out.tensor_bytes,
                sparse=sparse,
                seed=seed,
            ),
            fmt,
            human=_render_result,
        )


class _progress:
    """Context manager yielding (Progress | None, task id)."""

    def __init__(self, show: bool) -> None:
        self.bar = (
            Progress(
                TextColumn("[bold]synth[/] {task.fields[file]}"),
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=stderr_console(),
                transient=True,
            )
            if show
            else None
        )

    def __enter__(self):
        if self.bar is None:
            return None, 0
        self.bar.start()
        return self.bar, self.bar.add_task("synth", total=None, file="")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

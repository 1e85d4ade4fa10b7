"""``ckpt plan SRC``: what a conversion would do, without writing anything.

Human output is the plan's summary (tensors kept/renamed/redirected/padded/dropped, FSE
layers, padded sizes, files, bytes per rank, peak memory, notes); ``--format json`` prints the
whole plan (every output tensor as pieces of source tensors), the input of ``ckpt convert``.
``render_plan`` is shared with ``ckpt convert --dry-run``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from checkpoint_tool.cli.options import TargetOption
from checkpoint_tool.cli.output import BasicFormat, emit
from checkpoint_tool.errors import UsageError
from checkpoint_tool.plan.model import Plan, PlanOptions
from checkpoint_tool.plan.sharding import parse_size

_MAX_FILE_ROWS = 12


def parse_layers(text: str | None) -> list[int] | None:
    """``"3,4"`` / ``"3-5,7"`` -> ``[3, 4]`` / ``[3, 4, 5, 7]``."""
    if text is None or not text.strip():
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise UsageError(f"--layers {text!r}: write layer numbers like 3,4 or 3-5,7") from None
    return sorted(out)


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
    @app.command(
        "plan",
        help=(
            "Show what a conversion would do (renames, FSE redirection, padding, files), "
            "reading only headers and config.json; nothing is written.\n\n"
            "Examples:\n\n  ckpt plan /models/DeepSeek-R1 --tp 8\n\n"
            "  ckpt plan ./quark-hybrid --tp 2 --fse off --max-shard-size 2GB\n\n"
            "  ckpt plan ./quark-hybrid --tp 2 --target vllm-per-layer-fse\n\n"
            "  ckpt plan ./ckpt --layers 3,4 --format json > plan.json"
        ),
    )
    def plan_cmd(
        src: Annotated[str, typer.Argument(help="Checkpoint folder, file, or hub repo id.")],
        recipe: Annotated[
            str | None,
            typer.Option(
                help="Bundled recipe name or recipe .yaml path (default: from config.json)."
            ),
        ] = None,
        tp: Annotated[int, typer.Option(help="Tensor-parallel size the output is padded for.")] = 1,
        fse: Annotated[
            str,
            typer.Option(
                help="Fused shared experts: auto (what the --target engine fuses), on, off."
            ),
        ] = "auto",
        target: TargetOption = None,
        pad_to: Annotated[
            int | None,
            typer.Option(
                "--pad-to",
                help="Per-rank alignment of the expert intermediate size (default: what the schemes need).",
            ),
        ] = None,
        max_shard_size: Annotated[
            str,
            typer.Option("--max-shard-size", help="Largest output file, e.g. 5GB, 500MB, 4GiB."),
        ] = "5GB",
        layers: Annotated[
            str | None, typer.Option(help="Only these decoder layers, e.g. 3,4 or 3-5 (partial).")
        ] = None,
        layout: Annotated[
            str,
            typer.Option(
                help="Output layout: hf (HF-style shards + index) or vllm-sharded (per-rank files for --load-format sharded_state)."
            ),
        ] = "hf",
        fmt: Annotated[
            BasicFormat, typer.Option("--format", help="human (summary) or json (the whole plan).")
        ] = BasicFormat.human,
    ) -> None:
        from checkpoint_tool.cli.session import open_plan

        if fse not in ("auto", "on", "off"):
            raise UsageError(f"--fse must be auto, on or off, got {fse!r}")
        if layout not in ("hf", "vllm-sharded"):
            raise UsageError(f"--layout must be hf or vllm-sharded, got {layout!r}")
        options = PlanOptions(
            tp=tp,
            layout=layout,  # type: ignore[arg-type]
            fse=fse,  # type: ignore[arg-type]
            target=target,
            pad_to=pad_to,
            max_shard_size=parse_size(max_shard_size),
            layers=parse_layers(layers),
        )
        _, plan = open_plan(src, options, recipe=recipe)
        emit(plan, fmt, human=render_plan)

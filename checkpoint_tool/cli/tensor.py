"""``ckpt tensor SRC NAME``: one tensor's header facts, scheme (and why), decoded-value stats."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checkpoint_tool.cli.options import FormatOpt, SourceArg
from checkpoint_tool.cli.output import emit
from checkpoint_tool.errors import UsageError

if TYPE_CHECKING:  # the library part imports torch: load it only when the command runs
    from checkpoint_tool.quant.tensor_report import TensorReport, ValueStats

HELP = (
    "Show one tensor: where it lives, the quantization scheme that applies (and the config "
    "rule that matched), and stats of its dequantized values; optionally write them to .npy.\n\n"
    "NAME may be a tensor or a module (its .weight is used). Scale tensors are decoded too "
    "(E8M0 255 = NaN, non-finite and non-positive scales are counted).\n\n"
    "Examples:\n\n"
    "  ckpt tensor /models/quark-mxfp4 model.layers.3.mlp.experts.0.down_proj.weight\n\n"
    "  ckpt tensor ./ckpt model.layers.0.self_attn.q_a_proj --format json\n\n"
    "  ckpt tensor ./ckpt model.layers.3.mlp.experts.0.down_proj --dequant --out w.npy"
)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def _stats_row(s: ValueStats) -> list[str]:
    return [
        str(s.count),
        _fmt(s.min),
        _fmt(s.max),
        _fmt(s.mean),
        _fmt(s.absmax),
        str(s.nan),
        str(s.inf),
    ]


def render(report: TensorReport, console: Console) -> None:
    """Human view: facts, scheme, value stats, scale stats, issues."""
    r = report
    console.print(f"[bold]{escape(r.name)}[/]  ({r.role} of {escape(r.module or '<root>')})")
    console.print(
        f"  file {escape(r.file)}  bytes [{r.byte_range[0]}, {r.byte_range[1]}) = {r.nbytes}  "
        f"{r.dtype} {escape(str(r.shape))}  logical {escape(str(r.logical_shape))}"
    )
    console.print(f"  scheme [cyan]{escape(r.scheme.short)}[/]  rule: {escape(r.scheme.rule)}")
    if r.scheme.producer_rule:
        console.print(f"  [yellow]producer resolved it as {escape(r.scheme.producer_rule)}[/]")
    table = Table("values", "count", "min", "max", "mean", "absmax", "NaN", "Inf")
    table.add_row(r.decoded, *_stats_row(r.values))
    console.print(table)
    if r.scales:
        st = Table("scale", "dtype", "shape", "enc", "min", "max", "E8M0 255", "non-finite", "<= 0")
        for s in r.scales:
            st.add_row(
                escape(s.name),
                s.dtype,
                escape(str(s.shape)),
                s.encoding,
                _fmt(s.values.min),
                _fmt(s.values.max),
                str(s.e8m0_nan),
                str(s.non_finite),
                str(s.non_positive),
            )
        console.print(st)
    for issue in r.issues:
        colour = "red" if issue.severity == "error" else "yellow"
        console.print(f"  [{colour}]{escape(issue.line())}[/]")
    if r.out:
        console.print(f"  wrote float32 {escape(str(r.logical_shape))} to {escape(r.out)}")


def register(app: typer.Typer) -> None:
    @app.command("tensor", help=HELP)
    def tensor(
        src: SourceArg,
        name: Annotated[str, typer.Argument(help="Tensor or module name.")],
        dequant: Annotated[
            bool, typer.Option("--dequant", help="Write the dequantized float32 values (--out).")
        ] = False,
        out: Annotated[
            Path | None, typer.Option("--out", help="Output .npy file for --dequant.")
        ] = None,
        fmt: FormatOpt = "human",
    ) -> None:
        from checkpoint_tool.cli.session import opened
        from checkpoint_tool.quant.tensor_report import tensor_report

        if dequant and out is None:
            raise UsageError("--dequant needs --out F.npy (where to write the float32 values)")
        if out is not None and not dequant:
            raise UsageError(f"--out {out} is only used with --dequant; add --dequant")
        if out is not None and out.suffix != ".npy":
            raise UsageError(f"--out {out}: give a .npy file name (numpy format, float32)")
        with opened(src) as cat:  # the catalog and its findings: collected once, afterwards
            report = tensor_report(cat, name, out=out)
        emit(report, fmt, human=render)

"""Human rendering of a ``VerifyReport``: one line per section, a table of mismatched tensors,
a table of sampled layers (errors against tolerances), notes, and the verdict.

Example (abridged)::

    lossless  passed  306 tensors in 1 file(s), 6.10 MB compared (213 padded); plan = manifest
    numeric   passed  triton on cpu, TP 2, 16 tokens, seed 0
     layer  policy                                        experts  max abs  max rel  rel L2   tol     status
     1      separate shared, padded, mxfp4/32 routed, ...  8        1.2e-06  3.1e-07  3.1e-07  2e-05   passed
    PASSED: ckpt verify /out/model --source /models/quark-hybrid
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checkpoint_tool.execute.progress import human_bytes
from checkpoint_tool.verify.report import LosslessReport, NumericReport, VerifyReport

STYLE = {"passed": "green", "failed": "bold red", "skipped": "dim"}


def _status(status: str) -> str:
    return f"[{STYLE.get(status, '')}]{status}[/]"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def lossless_line(r: LosslessReport) -> str:
    if r.status == "skipped":
        return f"skipped ({r.reason})"
    plan = {True: "plan = manifest", False: "plan rebuilt differs from manifest", None: ""}[
        r.plan_matches_manifest
    ]
    line = (
        f"{r.tensors_checked} tensors in {r.files_checked} file(s), "
        f"{human_bytes(r.bytes_compared)} compared ({r.tensors_padded} padded)"
        f"{'; ' + plan if plan else ''}; {r.seconds:.1f} s"
    )
    if r.mismatch_count:
        line += f"; {r.mismatch_count} mismatch(es)"
    return line


def numeric_line(r: NumericReport) -> str:
    if r.status == "skipped" and not r.layers:
        return f"skipped ({r.reason})"
    line = (
        f"{r.backend} on {r.device}, TP {r.tp}, {r.tokens} tokens, seed {r.seed}, "
        f"{len(r.layers)} layer(s); {r.seconds:.1f} s"
    )
    if r.skipped_layers:
        ran = ",".join(map(str, r.ran_layers)) or "none"
        line += f"; ran {ran}, did not run {','.join(map(str, r.skipped_layers))}"
    if r.not_run_layers:
        line += f"; {len(r.not_run_layers)} layer(s) not started within --max-seconds"
    return line


def render_human(report: VerifyReport, console: Console) -> None:
    console.print(f"[bold]ckpt verify[/] {escape(report.dst)} --source {escape(report.source)}")
    console.print(f"lossless  {_status(report.lossless.status)}  {lossless_line(report.lossless)}")
    if report.lossless.mismatches:
        table = Table(show_edge=False, pad_edge=False)
        for col in ("tensor / file", "kind", "what"):
            table.add_column(col, overflow="fold")
        for m in report.lossless.mismatches:
            where = f"{m.tensor}\n[dim]{m.file}[/]" if m.tensor else m.file
            what = m.message
            if m.expected_hex is not None:
                what += f" (expected {m.expected_hex}, found {m.actual_hex})"
            table.add_row(where, m.kind, escape(what))
        console.print(table)
        if report.lossless.mismatches_not_listed:
            console.print(
                f"... and {report.lossless.mismatches_not_listed} more mismatch(es) "
                "(--max-mismatches, or --format json)"
            )
    console.print(f"numeric   {_status(report.numeric.status)}  {numeric_line(report.numeric)}")
    if report.numeric.layers:
        table = Table(show_edge=False, pad_edge=False)
        table.add_column("layer", justify="right")
        table.add_column("policy", overflow="fold")
        table.add_column("experts", justify="right")
        table.add_column("max abs", justify="right")
        table.add_column("max rel", justify="right")
        table.add_column("rel L2", justify="right")
        table.add_column("tolerance", justify="right")
        table.add_column("status")
        table.add_column("s", justify="right")
        for lr in report.numeric.layers:
            tol = (
                "-"
                if lr.rel_tolerance is None
                else f"{lr.rel_tolerance:.0e} / {lr.max_rel_tolerance:.0e}"
            )
            table.add_row(
                str(lr.layer),
                lr.policy,
                str(lr.experts_used),
                _num(lr.max_abs_error),
                _num(lr.max_rel_error),
                _num(lr.rel_error),
                tol,
                _status(lr.status),
                f"{lr.seconds:.1f}",
            )
        console.print(table)
        for lr in report.numeric.layers:
            if lr.message:
                console.print(f"  layer {lr.layer}: {escape(lr.message)}")
    for er in report.numeric.engram:
        what = f"{er.rows_checked} row(s) decoded equal" if er.status == "passed" else er.message
        console.print(
            f"  engram table layer {er.layer} ({escape(er.tensor)}): {_status(er.status)}"
            f"{'  ' + escape(what) if what else ''}"
        )
    if report.numeric.layers or report.numeric.engram:
        if report.numeric.reason:
            console.print(f"  numeric: {escape(report.numeric.reason)}")
        bases = sorted({lr.tolerance_basis for lr in report.numeric.layers if lr.tolerance_basis})
        if bases:
            console.print(f"[dim]tolerance (rel L2 / max rel): {'; '.join(bases)}[/]")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(f"{verdict} in {report.seconds:.1f} s")

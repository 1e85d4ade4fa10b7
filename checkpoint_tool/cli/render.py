"""The human renderers of ``ckpt plan``, ``ckpt convert`` and their spread variants.

Each takes the command's report and a rich console (``cli.output.emit`` calls it for
``--format human``). ``ckpt convert --dry-run`` draws the plan as ``ckpt plan`` does; both end
with the ``--target`` line.

Example::

    emit(plan, "human", human=render_plan)
    # plan ./quark-hybrid -> layout hf, tp 2, fse auto, recipe deepseek-v3
    # ... the tensors and files tables ...
    # target vllm-0.33 (stock vLLM 0.33 on CUDA, ...): no fused shared experts; no engine ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from checkpoint_tool.plan.build import serve_settings, target_of

if TYPE_CHECKING:
    from rich.console import Console

    from checkpoint_tool.execute.distributed.parts import PartReport
    from checkpoint_tool.execute.runner import ConvertReport
    from checkpoint_tool.plan.model import Plan
    from checkpoint_tool.verify.spread import VerifyPartReport

#: output files listed one per row; the rest are summed in one row
MAX_FILE_ROWS = 12


def _size(n: int) -> str:
    for unit, div in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def _layers_label(layers: list[int]) -> str:
    if not layers:
        return ""
    return str(layers[0]) if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"


def render_plan(plan: Plan, console: Console) -> None:
    """The human summary of a plan (``ckpt plan``, ``ckpt convert --dry-run``)."""
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
    for f in s.files[:MAX_FILE_ROWS]:
        files.add_row(f.name, str(f.tensors), _size(f.nbytes), _layers_label(f.layers))
    if len(s.files) > MAX_FILE_ROWS:
        rest = s.files[MAX_FILE_ROWS:]
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
    render_target(plan, console)
    console.print("[dim]nothing was written; `ckpt convert` runs this plan[/]")


def render_target(plan: Plan, console: Console) -> None:
    """``target vllm-0.33 (stock vLLM 0.33 on CUDA ...): ...; no engine settings needed``, or
    the settings the target needs."""
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


def render_convert(report: ConvertReport, console: Console) -> None:
    """``converted DST: N file(s) written (...)`` and the tensor / manifest line."""
    from checkpoint_tool.execute.progress import human_bytes  # the convert path only

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


def render_part(report: PartReport, console: Console) -> None:
    """``part I/N of DST: ...; When every part is done: ckpt convert SRC DST ... --finalize``."""
    from checkpoint_tool.execute.progress import human_bytes  # the convert path only

    console.print(
        f"[bold green]part {report.part}/{report.parts}[/] of {report.dst}: "
        f"{report.files_written} file(s) written ({human_bytes(report.bytes_written)}, "
        f"{report.seconds:.1f} s)"
        + (f", {report.files_kept} verified and kept" if report.files_kept else "")
        + f"; this part holds {len(report.files)} file(s), {human_bytes(report.part_bytes)} "
        f"of {human_bytes(report.total_size)}. When every part is done: ckpt convert SRC DST "
        "(same options) --finalize"
    )


def render_verify_part(report: VerifyPartReport, console: Console) -> None:
    """``verify part I/N of DST: lossless passed (...)``, then each mismatch."""
    ll = report.lossless
    mark = "[bold red]FAILED[/]" if ll.status == "failed" else "[bold green]passed[/]"
    console.print(
        f"verify part {report.part}/{report.parts} of {report.dst}: lossless {mark} "
        f"({ll.files_checked} file(s), {ll.tensors_checked} tensors, {ll.mismatch_count} "
        "mismatch(es)); merge every part's --format json report with --merge"
    )
    for m in ll.mismatches:
        console.print(f"  {m.file} {m.tensor}: {m.kind}: {m.message}")

"""``ckpt inspect --format html``: the layer policy as one self-contained page.

Drawn from the ``PolicyReport`` alone (the JSON of ``--format json``: parse that JSON back and
the page is byte-identical). Title and options, the summary banner, the map (one column per
MoE layer), the legend, the skip reasons with their layers, one panel of numbers per layer
(click a column), the findings and the engine section.

Example::

    html = render_policy_html(PolicyReport.model_validate_json(Path("policy.json").read_text()))
    Path("policy.html").write_text(html)      # open it, or keep it as a CI artifact
"""

from __future__ import annotations

from collections.abc import Sequence

from checkpoint_tool.html.cells import Row, policy_rows
from checkpoint_tool.html.layer_map import render_map
from checkpoint_tool.html.page import esc, page, section, verdict
from checkpoint_tool.html.panels import engine_table, issues_table, layer_panels, legend
from checkpoint_tool.policy.report import PolicyReport
from checkpoint_tool.report import Issue


def model_line(report: PolicyReport) -> str:
    """``deepseek_v3 (deepseek_v3) · quark 0.13: ... · 4 MoE layers of 4 + 1 MTP · tp 2, fse auto``."""
    md = report.model
    opts = [f"tp {report.tp}"]
    opts += [flag for flag, on in (("ep", report.ep), ("eplb", report.eplb)) if on]
    if report.all2all:
        opts.append(f"all2all {report.all2all}")
    opts.append(f"fse {report.fse_mode}")
    mtp = f" + {md.num_mtp_layers} MTP" if md.num_mtp_layers else ""
    return (
        f"{md.family} ({md.model_type or '?'}) · {md.quant_summary or md.quant_method} · "
        f"{md.num_moe_layers} MoE layers of {md.num_hidden_layers}{mtp} · {', '.join(opts)} · "
        f"{md.tensors} tensors in {md.files} files, {md.data_bytes / 2**30:.2f} GiB of data"
    )


def layer_ranges(layers: Sequence[int]) -> str:
    """``[3, 4, 5, 7, 9, 10]`` -> ``"3-5, 7, 9-10"``."""
    runs: list[list[int]] = []
    for x in sorted(layers):
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def fse_headline(report: PolicyReport) -> str:
    """``summary.text`` with its layer lists as ranges (a 61-layer list fills two lines)."""
    s = report.summary
    parts = [
        f"{what} on {len(layers)} MoE layer(s) {layer_ranges(layers)}"
        for what, layers in (
            ("enabled", s.fse_enabled_layers),
            ("disabled", s.fse_disabled_layers),
            ("not applicable (no shared experts)", s.fse_not_applicable_layers),
        )
        if layers
    ]
    return "fused shared experts: " + "; ".join(parts) if parts else (s.text or "no MoE layers")


def policy_banner(report: PolicyReport) -> str:
    s = report.summary
    sub = [f"policy: {s.errors} error(s), {s.warnings} warning(s)"]
    if s.padded_layers:
        sub.append(f"padding needed for tp {report.tp} on MoE layer(s) {s.padded_layers}")
    if report.engine is not None:
        e = report.engine.summary
        sub.append(e.text or f"{report.engine.target}: no finding")
    return verdict(fse_headline(report), sub, bad=report.has_errors)


def map_section(report: PolicyReport, rows: Sequence[Row]) -> str:
    """The map, its legend and the skip reasons; a note instead when there is no MoE layer."""
    if not report.moe_layers:
        return section("Layer map", "<p>No MoE layers: nothing to draw.</p>", anchor="map")
    reasons = "".join(
        f"<li><code>{esc(layers)}</code>: {esc(template)}</li>"
        for template, layers in report.summary.reasons.items()
    )
    body = (
        '<p class="hint">One column per MoE layer. Hover a cell for the reason; click a column '
        "for its numbers.</p>"
        f'<div class="scroll">{render_map(report, rows)}</div>\n{legend(report)}'
        + (f"<h3>why not fused</h3><ul>{reasons}</ul>" if reasons else "")
    )
    return section("Layer map", body, anchor="map")


def policy_sections(
    report: PolicyReport,
    *,
    extra_rows: Sequence[Row] = (),
    extra_findings: dict[str, Sequence[Issue]] | None = None,
) -> list[str]:
    """Map, panels, findings and engine sections (the validate page reuses them)."""
    parts = [
        map_section(report, [*policy_rows(report), *extra_rows]),
        layer_panels(report, extra_findings),
        section(
            f"Policy findings ({report.summary.errors} error(s), "
            f"{report.summary.warnings} warning(s))",
            issues_table(report.issues),
        ),
    ]
    if report.engine is not None:
        parts.append(section(f"Engine: {report.engine.target}", engine_table(report)))
    for note in report.model.notes:
        parts.append(f'<p class="hint">note: {esc(note)}</p>')
    return parts


def render_policy_html(report: PolicyReport) -> str:
    """The whole page for ``ckpt inspect --format html``."""
    head = [
        f"<h1>ckpt inspect: <code>{esc(report.source)}</code></h1>",
        f'<p class="meta">{esc(model_line(report))}</p>',
        policy_banner(report),
    ]
    return page(
        f"ckpt inspect {report.source}",
        [*head, *policy_sections(report)],
        footer=f"ckpt inspect --format html · PolicyReport schema_version {report.schema_version}",
    )

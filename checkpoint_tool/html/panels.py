"""The parts around the map: the legend, one panel of numbers per layer, the findings tables.

A layer's panel (``<section id="layer-3" class="panel">``, shown when a map column is clicked)
lists every field of that ``MoeLayerPolicy`` as in the JSON (dotted keys, e.g.
``intermediate.padded_per_rank 96``), then the engine findings and the findings on that layer.

Example::

    flat_fields(layer)[:2]
    # [('layer', '3'), ('prefix', 'model.layers.3.mlp')]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from checkpoint_tool.html.cells import (
    ALIGNED_FILL,
    FSE_FILL,
    NONE_FILL,
    PADDED_FILL,
    issues_by_layer,
    scheme_keys,
)
from checkpoint_tool.html.layer_map import MTP_FILL
from checkpoint_tool.html.page import SEVERITY_FILL, cell, esc, rows_html, table
from checkpoint_tool.policy.report import MoeLayerPolicy, PolicyReport
from checkpoint_tool.report import Issue


def flat_fields(layer: MoeLayerPolicy) -> list[tuple[str, str]]:
    """The layer's JSON fields as (dotted key, value text), in the JSON's (sorted) order."""
    out: list[tuple[str, str]] = []

    def walk(doc: Any, prefix: str) -> None:
        for k in sorted(doc):
            v, key = doc[k], f"{prefix}{k}"
            if isinstance(v, dict) and v:
                walk(v, key + ".")
            elif isinstance(v, (dict, list)):
                out.append((key, json.dumps(v, sort_keys=True)))
            elif v is None:
                out.append((key, "null"))
            elif isinstance(v, bool):
                out.append((key, str(v).lower()))
            else:
                out.append((key, str(v)))

    walk(layer.model_dump(mode="json"), "")
    return out


def _swatch(fill: str, text: str) -> str:
    return f'<span><span class="sw" style="background:{fill}"></span>{esc(text)}</span>'


def legend(report: PolicyReport) -> str:
    """Colour keys: each scheme (with its key letter), FSE, padding, severities."""
    keys = scheme_keys(report)
    counts: dict[str, list[int]] = {s: [0, 0] for s in keys}
    for m in report.moe_layers:
        counts[m.routed.scheme][0] += 1
        if m.shared is not None:
            counts[m.shared.scheme][1] += 1
    schemes = [
        _swatch(
            fill,
            f"{key} = {scheme} (routed on {counts[scheme][0]}, shared on "
            f"{counts[scheme][1]} layer(s))",
        )
        for scheme, (key, fill) in keys.items()
    ]
    fse = [
        _swatch(FSE_FILL["fused"], "fused shared experts"),
        _swatch(FSE_FILL["unfused-vllm"], "not fused: vLLM's gate"),
        _swatch(FSE_FILL["unfused-ckpt"], "not fused: storage layout"),
        _swatch(FSE_FILL["unfused-option"], "not fused: option"),
        _swatch(FSE_FILL["unfused-target"], "not fused: the target engine fuses none (--target)"),
        _swatch(FSE_FILL["n/a"], "no shared experts"),
    ]
    other = [
        _swatch(ALIGNED_FILL, "per-rank size aligned (the number)"),
        _swatch(PADDED_FILL, "needs padding (per rank -> padded)"),
        _swatch(NONE_FILL, "none / not split"),
        _swatch(SEVERITY_FILL["error"], "error"),
        _swatch(SEVERITY_FILL["warning"], "warning"),
        _swatch(SEVERITY_FILL["info"], "info"),
        _swatch(SEVERITY_FILL["ok"], "no finding"),
        _swatch(MTP_FILL, "MTP layer"),
    ]
    return "\n".join(
        f'<div class="legend">{"".join(group)}</div>' for group in (schemes, fse, other)
    )


def issue_rows(issues: Iterable[Issue]) -> str:
    """Body rows (severity, rule, file, tensor, message) for a findings table."""
    return rows_html(
        [
            cell(i.severity, f"sev-{i.severity}"),
            cell(i.rule, "mono rule"),
            cell(i.file or "", "mono"),
            cell(i.tensor or "", "mono"),
            cell(i.message),
        ]
        for i in issues
    )


def issues_table(issues: Sequence[Issue]) -> str:
    if not issues:
        return "<p>No findings.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("severity", "rule", "file", "tensor", "message"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{issue_rows(issues)}</tbody></table>"


def engine_table(report: PolicyReport, layer: int | None = None) -> str:
    """The engine findings (of one layer, or all of them)."""
    eng = report.engine
    if eng is None:
        return ""
    found = [f for f in eng.findings if layer is None or layer in f.layers]
    if not found:
        return f"<p>No {esc(eng.target)} finding.</p>"
    rows = rows_html(
        [
            cell(f.severity, f"sev-{f.severity}"),
            cell(f.rule, "mono rule"),
            cell(", ".join(map(str, f.layers)) or "model"),
            cell(f.message),
            cell(f.upstream or ""),
            cell(f.source, "mono"),
        ]
        for f in found
    )
    head = "".join(
        f"<th>{h}</th>" for h in ("severity", "rule", "layers", "what", "engine says", "source")
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def layer_panels(report: PolicyReport, extra: dict[str, Sequence[Issue]] | None = None) -> str:
    """One hidden panel per layer; ``extra`` adds findings tables (title -> findings)."""
    policy_issues = issues_by_layer(report, report.issues)
    extra_by_layer = {
        title: issues_by_layer(report, found) for title, found in (extra or {}).items()
    }
    out = []
    for m in report.moe_layers:
        parts = [
            f"<h3>MoE layer {m.layer}{' (MTP)' if m.is_mtp else ''}: "
            f'<code>{esc(m.prefix)}</code> <a href="#map">back to the map</a></h3>',
            table(("field", "value"), flat_fields(m)),
        ]
        if report.engine is not None:
            parts += [f"<h3>{esc(report.engine.target)}</h3>", engine_table(report, m.layer)]
        parts += ["<h3>findings</h3>", issues_table(policy_issues[m.layer])]
        for title, by_layer in extra_by_layer.items():
            parts += [f"<h3>{esc(title)}</h3>", issues_table(by_layer[m.layer])]
        out.append(f'<section class="panel" id="layer-{m.layer}">{"".join(parts)}</section>')
    return "\n".join(out)

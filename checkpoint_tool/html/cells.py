"""The cells of the layer map, read off a ``PolicyReport``: one row per question, one cell per layer.

Rows: routed scheme, shared scheme, FSE (fused / why not), routed and shared intermediate per
rank (padding), the engine's verdict (``--target``) and the findings. Every cell carries
its labels (longest first; the map draws the longest that fits), a fill colour, a hover text
and a ``kind`` (a stable word for tests and CSS). Nothing is recomputed: each value is a field
of the report, and findings are placed on the layers they name.

Example::

    rows = policy_rows(report)
    rows[2].name, rows[2].cells[0]
    # ('FSE', Cell(labels=('no: quark_excludes_shared', 'no', 'n'), fill='#e8912d',
    #              title='MoE layer 1: not fused (vllm, quark_excludes_shared): Quark ...',
    #              kind='unfused-vllm'))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from checkpoint_tool.html.page import SEVERITY_FILL
from checkpoint_tool.policy.report import MoeLayerPolicy, PolicyReport, TpGeometry
from checkpoint_tool.report import Issue

#: one colour per distinct scheme, in order of first appearance (no green, orange, red or
#: purple: those say fused / not fused / error / padded in the other rows)
PALETTE = (
    "#4e79a7", "#b07aa1", "#76b7b2", "#9c755f", "#ff9da7",
    "#a0cbe8", "#499894", "#d4a6c8", "#bab0ac", "#79706e",
)  # fmt: skip
UNQUANTIZED_FILL = "#c7ccd4"
NONE_FILL = "#f3f5f8"
FSE_FILL = {
    "fused": "#2e9d4f",
    "unfused-vllm": "#e8912d",
    "unfused-ckpt": "#c8553d",
    "unfused-option": "#8c8ca6",
    "unfused-target": "#5b8db8",
    "n/a": "#e4e7ec",
}
ALIGNED_FILL = "#dcebdf"
PADDED_FILL = "#7b5cb8"
#: hover texts list at most this many findings per cell (the panel and the table list all)
MAX_TITLE_LINES = 8

_LAYERS_IN_MESSAGE = re.compile(r"^MoE layer(?:\(s\))? \[?([0-9][0-9, ]*)\]?")


class Cell(NamedTuple):
    labels: tuple[str, ...]
    fill: str
    title: str
    kind: str


class Row(NamedTuple):
    name: str
    key: str
    cells: list[Cell]


def scheme_keys(report: PolicyReport) -> dict[str, tuple[str, str]]:
    """Scheme label -> (key letter, fill), routed before shared, in layer order."""
    out: dict[str, tuple[str, str]] = {}
    for m in report.moe_layers:
        for s in (m.routed, m.shared):
            if s is None or s.scheme in out:
                continue
            n = len(out)
            key = chr(ord("A") + n) if n < 26 else f"S{n}"
            fill = UNQUANTIZED_FILL if s.scheme == "unquantized" else PALETTE[n % len(PALETTE)]
            out[s.scheme] = (key, fill)
    return out


def _scheme_cells(report: PolicyReport, keys: dict[str, tuple[str, str]], shared: bool) -> Row:
    cells = []
    for m in report.moe_layers:
        s = m.shared if shared else m.routed
        what = "shared expert(s)" if shared else "routed experts"
        if s is None:
            cells.append(Cell(("none", "-"), NONE_FILL, f"MoE layer {m.layer}: no {what}", "none"))
            continue
        key, fill = keys[s.scheme]
        per = ", ".join(f"{p} {v}" for p, v in sorted(s.per_projection.items()))
        title = (
            f"MoE layer {m.layer} {what}: {s.scheme} ({s.format}), {s.count} x {s.width}, "
            f"layout {s.layout}, {s.prefix}"
            + (f"; per projection: {per}" if per else "")
            + (f"; {s.rule}" if s.rule else "")
        )
        cells.append(Cell((s.scheme, key), fill, title, f"scheme-{key}"))
    name = "shared scheme" if shared else "routed scheme"
    return Row(name, "shared" if shared else "routed", cells)


def _fse_cell(m: MoeLayerPolicy) -> Cell:
    f = m.fse
    if f.code == "no_shared_experts":
        return Cell(("n/a", "-"), FSE_FILL["n/a"], f"MoE layer {m.layer}: {f.reason}", "n/a")
    if f.enabled:
        title = f"MoE layer {m.layer}: fused into routed slot(s) {f.slots}, {f.chunk_size} wide"
        return Cell(("fused", "on", "y"), FSE_FILL["fused"], title, "fused")
    kind = f"unfused-{f.source}" if f"unfused-{f.source}" in FSE_FILL else "unfused-ckpt"
    title = f"MoE layer {m.layer}: not fused ({f.source}, {f.code}): {f.reason or f.code}"
    return Cell((f"no: {f.code}", "no", "n"), FSE_FILL[kind], title, kind)


def _geometry_cell(layer: int, what: str, g: TpGeometry | None, fused: bool) -> Cell:
    if g is None:
        text = "fused into the routed experts" if fused else "no separate shared MLP"
        return Cell(("-",), NONE_FILL, f"MoE layer {layer} {what}: {text}", "none")
    numbers = f"{g.size} / tp {g.tp} = {g.per_rank} per rank, alignment {g.alignment}" + (
        f" ({g.alignment_from})" if g.alignment_from else ""
    )
    if g.aligned and g.divisible:
        title = f"MoE layer {layer} {what}: {numbers}; no padding"
        return Cell((str(g.per_rank),), ALIGNED_FILL, title, "aligned")
    extra = g.padded_per_rank - g.per_rank
    title = (
        f"MoE layer {layer} {what}: {numbers}; pad to {g.pad_to} "
        f"({g.padded_per_rank} per rank, +{extra})"
    )
    labels = (f"{g.per_rank}->{g.padded_per_rank}", f"+{extra}", "+")
    return Cell(labels, PADDED_FILL, title, "padded")


def _lines_title(head: str, lines: Sequence[str]) -> str:
    shown = list(lines[:MAX_TITLE_LINES])
    if len(lines) > MAX_TITLE_LINES:
        shown.append(f"... and {len(lines) - MAX_TITLE_LINES} more (click)")
    return "\n".join([head, *shown])


def _severity_cell(layer: int, what: str, items: list[tuple[str, str]], ok_label: str) -> Cell:
    """A cell for (severity, line) items: the worst severity colours it, the count labels it."""
    if not items:
        return Cell((ok_label, "-"), SEVERITY_FILL["ok"], f"MoE layer {layer}: no {what}", "ok")
    order = ("error", "warning", "info")
    worst = min((s for s, _ in items), key=order.index)
    counts = {s: sum(1 for x, _ in items if x == s) for s in order}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    head = f"MoE layer {layer} {what}: {summary}"
    short = {"error": "E", "warning": "W", "info": "i"}[worst]
    n = counts[worst]
    labels = (f"{n} {worst}{'s' if n > 1 else ''}", f"{n}{short}", short)
    return Cell(labels, SEVERITY_FILL[worst], _lines_title(head, [x for _, x in items]), worst)


def layer_roots(report: PolicyReport) -> list[tuple[str, int]]:
    """``("model.layers.3.", 3)`` for each MoE layer: the prefix its tensors start with."""
    return [(m.prefix.rsplit(".", 1)[0] + ".", m.layer) for m in report.moe_layers]


def issue_layers(issue: Issue, roots: Sequence[tuple[str, int]]) -> list[int]:
    """The MoE layers a finding names: by its tensor's module prefix, else by a leading
    ``MoE layer(s) [2, 3]:`` in its message; [] for a model-wide finding."""
    if issue.tensor:
        for root, layer in roots:
            if issue.tensor.startswith(root) or issue.tensor + "." == root:
                return [layer]
    m = _LAYERS_IN_MESSAGE.match(issue.message)
    if m:
        known = {layer for _, layer in roots}
        return sorted({int(x) for x in m.group(1).replace(" ", "").split(",") if x} & known)
    return []


def issues_by_layer(report: PolicyReport, issues: Iterable[Issue]) -> dict[int, list[Issue]]:
    """Findings placed on their layers (layer -> findings, in report order)."""
    roots = layer_roots(report)
    out: dict[int, list[Issue]] = {m.layer: [] for m in report.moe_layers}
    for issue in issues:
        for layer in issue_layers(issue, roots):
            out[layer].append(issue)
    return out


def findings_row(report: PolicyReport, name: str, key: str, issues: Iterable[Issue]) -> Row:
    by_layer = issues_by_layer(report, issues)
    cells = [
        _severity_cell(
            m.layer, name, [(i.severity, i.line()) for i in by_layer[m.layer]], ok_label="0"
        )
        for m in report.moe_layers
    ]
    return Row(name, key, cells)


def engine_row(report: PolicyReport) -> Row | None:
    eng = report.engine
    if eng is None:
        return None
    cells = []
    for m in report.moe_layers:
        items = [(f.severity, f.line()) for f in eng.findings if m.layer in f.layers]
        cells.append(_severity_cell(m.layer, f"{eng.target} findings", items, ok_label="ok"))
    # the row name column is fixed (layer_map.LABEL_W): target names such as
    # vllm-0.33-rocm-aiter-fse do not fit it; each cell's hover and the banner name the target
    name = f"engine {eng.target}" if len(eng.target) <= 9 else "engine"
    return Row(name, "engine", cells)


def policy_rows(report: PolicyReport) -> list[Row]:
    """The map's rows for an inspect report (the validate page appends its own)."""
    keys = scheme_keys(report)
    rows = [
        _scheme_cells(report, keys, shared=False),
        _scheme_cells(report, keys, shared=True),
        Row("FSE", "fse", [_fse_cell(m) for m in report.moe_layers]),
        Row(
            "routed I / rank",
            "pad",
            [
                _geometry_cell(m.layer, "routed intermediate", m.intermediate, False)
                for m in report.moe_layers
            ],
        ),
        Row(
            "shared I / rank",
            "shared_pad",
            [
                _geometry_cell(m.layer, "shared intermediate", m.shared_intermediate, m.fse.enabled)
                for m in report.moe_layers
            ],
        ),
    ]
    engine = engine_row(report)
    if engine is not None:
        rows.append(engine)
    rows.append(findings_row(report, "findings", "findings", report.issues))
    return rows

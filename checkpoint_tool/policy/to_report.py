"""``render_report``: a ``PolicyDecision`` as the ``PolicyReport`` of ``ckpt inspect``.

The report is a view: schemes as labels, the TP geometry of each layer's intermediate dim,
the model summary, and the findings (the decision's option findings, the catalog's scheme
findings, MoE structure, unmatched config patterns, padding), deduplicated.

Example::

    report = render_report(decide_policy(catalog, tp=2), catalog, findings=[])
    report.moe_layers[0].intermediate.padded_per_rank   # 96 (MXFP4 I=160 over 2 ranks)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from checkpoint_tool.model import ModelFacts, MoeLayerFacts
from checkpoint_tool.policy.consistency import unmatched_pattern_issues
from checkpoint_tool.policy.decision import LayerDecision, PolicyDecision
from checkpoint_tool.policy.report import ExpertSchemes, ModelSummary, MoeLayerPolicy, PolicyReport
from checkpoint_tool.policy.summary import padding_issues, summarize
from checkpoint_tool.policy.tp import tp_geometry
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.quant.resolve import ResolvedCatalog

#: what the report repeats of the model facts, as they are
_LAYER_FIELDS = {"layer", "prefix", "is_mtp", "n_routed", "n_shared", "top_k"}
_MODEL_FIELDS = {"family", "model_type", "hidden_size", "num_hidden_layers", "num_mtp_layers"}


def render_report(
    decision: PolicyDecision, catalog: Catalog, findings: list[Issue]
) -> PolicyReport:
    """The inspect report of ``decision`` (see the module docstring)."""
    facts = decision.facts
    rc = decision.resolved
    layers = [
        layer_policy(d, tp=decision.tp, ep=decision.ep) for _, d in sorted(decision.layers.items())
    ]
    where = str(catalog.root / "config.json")
    structure = decision.structure_issues
    unmatched = unmatched_pattern_issues(rc.qconfig, catalog.tensors, where)
    issues = _dedupe(
        [*decision.option_issues, *findings, *structure, *unmatched, *padding_issues(layers)]
    )
    return PolicyReport(
        source=str(catalog.source or catalog.root),
        model=_model_summary(catalog, facts, rc),
        tp=decision.tp,
        ep=decision.ep,
        eplb=decision.eplb,
        all2all=decision.all2all,
        fse_mode=decision.fse_mode,
        target=decision.target.name,
        moe_layers=layers,
        summary=summarize(layers, issues),
        issues=issues,
    )


def layer_policy(d: LayerDecision, *, tp: int, ep: bool) -> MoeLayerPolicy:
    """One layer of the report: schemes as labels, the TP geometry of its alignments."""
    layer = d.facts
    moe_tp = 1 if ep else tp
    shared_geo = None
    if d.shared_alignment is not None:
        shared_geo = tp_geometry(
            layer.shared_intermediate_size, tp, d.shared_alignment, d.shared_alignment_from
        )
    return MoeLayerPolicy(
        **layer.model_dump(include=_LAYER_FIELDS),
        routed=_expert_schemes(d.routed_schemes, layer, shared=False),
        shared=None
        if layer.n_shared <= 0
        else _expert_schemes(d.shared_schemes, layer, shared=True),
        fse=d.fse,
        intermediate=tp_geometry(
            layer.moe_intermediate_size, moe_tp, d.routed_alignment, d.routed_alignment_from
        ),
        shared_intermediate=shared_geo,
    )


def _expert_schemes(
    schemes: Mapping[str, Scheme], layer: MoeLayerFacts, *, shared: bool
) -> ExpertSchemes:
    """The routed (or shared) experts of ``layer`` as stored: one label, or one per projection."""
    labels = {p: s.short() for p, s in schemes.items()}
    distinct = sorted(set(labels.values()))
    first = next(iter(schemes.values()), None)
    if not distinct:
        label = fmt = "missing"
    elif len(distinct) == 1:
        label = distinct[0]
        fmt = first.format.value if first is not None else "missing"
    else:
        label = fmt = "mixed"
    return ExpertSchemes(
        scheme=label,
        format=fmt,
        rule=first.rule if first is not None else "",
        per_projection=labels if len(distinct) > 1 else {},
        layout=layer.naming.shared_layout if shared else layer.naming.routed_layout,
        prefix=(layer.shared_prefix or "") if shared else layer.routed_prefix,
        count=layer.n_shared if shared else layer.n_routed,
        width=layer.shared_intermediate_size if shared else layer.moe_intermediate_size,
    )


def _model_summary(catalog: Catalog, facts: ModelFacts, rc: ResolvedCatalog) -> ModelSummary:
    headers = catalog.headers
    if headers:
        data = sum(h.file_size - h.data_start for h in headers.values())
    else:
        data = sum(e.end - e.begin for e in catalog.tensors.values())
    return ModelSummary(
        **facts.model_dump(include=_MODEL_FIELDS),
        num_moe_layers=len(facts.moe_layers),
        quant_method=rc.qconfig.source,
        quant_summary=rc.qconfig.summary(),
        tensors=len(catalog.tensors),
        files=len(catalog.files),
        data_bytes=data,
        header_bytes_read=catalog.header_bytes_read,
        bytes_transferred=catalog.bytes_transferred,
        notes=list(facts.notes),
    )


def _dedupe(issues: list[Issue]) -> list[Issue]:
    seen: set[tuple] = set()
    out = []
    for i in issues:
        key = (i.severity, i.rule, i.tensor, i.message)
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out

"""``build_policy``: catalog (headers only) -> ``PolicyReport`` for the given engine options.

Steps: resolve every tensor's scheme (``quant.resolve``), derive the model facts, then per MoE
layer: the routed and shared schemes as stored, the FSE decision (vLLM gate, ckpt layout
check, ``--fse`` mode), the TP geometry of the intermediate dim; then the model-wide rules
(parallelism flags, ``--fse on``), the consistency findings and the summary. Pure apart from
``resolve_catalog`` reading the catalog already in memory: no tensor data is read.

Example::

    report = build_policy(open_catalog("/models/quark-hybrid"), tp=2)
    report.summary.text
    # 'fused shared experts: enabled on MoE layer(s) [3, 4]; disabled on MoE layer(s) [1, 2]'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint_tool.errors import UsageError
from checkpoint_tool.forked import spread_map
from checkpoint_tool.model import PROJS, ModelFacts, MoeLayerFacts, family_of, model_facts
from checkpoint_tool.policy.consistency import moe_structure_issues, unmatched_pattern_issues
from checkpoint_tool.policy.fse import apply_model_rules, decide_layer, prefused_decision
from checkpoint_tool.policy.fse_gates import vllm_fse_gate
from checkpoint_tool.policy.fse_layout import layout_check
from checkpoint_tool.policy.report import (
    ExpertSchemes,
    FseDecision,
    FseMode,
    ModelSummary,
    MoeLayerPolicy,
    PolicyReport,
)
from checkpoint_tool.policy.summary import padding_issues, summarize
from checkpoint_tool.policy.tp import intermediate_alignment, tp_geometry
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import ResolvedCatalog, resolve_catalog
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.report import Issue

FSE_MODES = ("auto", "on", "off")


def build_policy(
    catalog: Any,
    *,
    tp: int = 1,
    ep: bool = False,
    eplb: bool = False,
    all2all: str | None = None,
    fse: FseMode = "auto",
    resolved: ResolvedCatalog | None = None,
    target: Any = None,
) -> PolicyReport:
    """The per-layer policy of ``catalog`` for ``--tp``/``--ep``/``--eplb``/``--all2all``/``--fse``.

    ``target`` is the engine the output is for (a name, an engine ``Target``, or None: the
    default target, the newest stock vLLM on CUDA): under ``--fse auto`` only what it fuses at
    load time is fused. ``resolved`` may be passed when the caller already resolved the catalog.
    """
    from checkpoint_tool.policy.engine.model import Target, load_rule_table
    from checkpoint_tool.policy.prefused import prefused_slots

    tgt = target if isinstance(target, Target) else load_rule_table().target(target)
    if tp < 1:
        raise UsageError(f"--tp must be >= 1, got {tp}")
    if fse not in FSE_MODES:
        raise UsageError(f"--fse must be one of {', '.join(FSE_MODES)}, got {fse!r}")
    if eplb and not ep:
        raise UsageError("--eplb balances experts across EP ranks: it needs --ep")
    config = catalog.config or {}
    raw_qc = config.get("quantization_config")
    raw_qc = raw_qc if isinstance(raw_qc, dict) else None
    rc = resolved if resolved is not None else resolve_catalog(catalog)
    shapes = None
    if family_of(config) == "generic":
        shapes = {n: e.shape for n, e in catalog.tensors.items()}
    facts = model_facts(config, catalog.tensors, tensor_shapes=shapes)
    prefused = prefused_slots(config)

    layers: list[MoeLayerPolicy] = []
    decisions: dict[int, FseDecision] = {}
    stored: dict[int, tuple[dict[str, Scheme], dict[str, Scheme]]] = {}
    for layer in facts.moe_layers:
        routed = _stored_schemes(rc, layer, shared=False)
        shared = _stored_schemes(rc, layer, shared=True)
        stored[layer.layer] = (routed, shared)
        gate = (
            vllm_fse_gate(rc.qconfig, raw_qc, facts, layer, tgt.version) if layer.n_shared else None
        )
        layout = layout_check(layer, routed, shared) if layer.n_shared else None
        if layer.layer in prefused:
            decisions[layer.layer] = prefused_decision(
                prefused[layer.layer], layer.shared_chunk_size
            )
            continue
        decisions[layer.layer] = decide_layer(
            layer, gate=gate or _NA, layout=layout or _NA, mode=fse
        )
    decisions, option_issues = apply_model_rules(
        decisions, mode=fse, ep=ep, eplb=eplb, all2all=all2all, target=tgt
    )
    for layer in facts.moe_layers:
        routed, shared = stored[layer.layer]
        layers.append(_layer_policy(layer, routed, shared, decisions[layer.layer], tp=tp, ep=ep))

    where = str(catalog.root / "config.json")
    findings = catalog_findings(catalog, rc, spread=spread_map)
    structure = moe_structure_issues(facts, catalog.tensors, prefused)
    unmatched = unmatched_pattern_issues(rc.qconfig, catalog.tensors, where)
    padding = padding_issues(layers)
    issues: list[Issue] = [*option_issues, *findings, *structure, *unmatched, *padding]
    issues = _dedupe(issues)
    return PolicyReport(
        source=str(getattr(catalog, "source", "") or catalog.root),
        model=_model_summary(catalog, facts, rc),
        tp=tp,
        ep=ep,
        eplb=eplb,
        all2all=all2all,
        fse_mode=fse,
        target=tgt.name,
        moe_layers=layers,
        summary=summarize(layers, issues),
        issues=issues,
    )


class _NotApplicable:
    compatible = True
    code = "ok"
    template = None
    params: dict[str, str] = {}


_NA: Any = _NotApplicable()


def _stored_schemes(
    rc: ResolvedCatalog, layer: MoeLayerFacts, *, shared: bool
) -> dict[str, Scheme]:
    """proj -> scheme of the stored weight (routed expert 0 / shared expert 0), when present."""
    out: dict[str, Scheme] = {}
    if shared and layer.n_shared <= 0:
        return out
    for proj in PROJS:
        name = f"{layer.shared_module(proj, 0)}.weight" if shared else layer.routed_weight(0, proj)
        t = rc.tensors.get(name)
        if t is not None:
            out[proj] = t.scheme
    return out


def _expert_schemes(
    schemes: Mapping[str, Scheme], *, layout: str, prefix: str, count: int, width: int
) -> ExpertSchemes:
    labels = {p: s.short() for p, s in schemes.items()}
    distinct = sorted(set(labels.values()))
    first = next(iter(schemes.values()), None)
    return ExpertSchemes(
        scheme=distinct[0] if len(distinct) == 1 else ("missing" if not distinct else "mixed"),
        format=first.format.value
        if first is not None and len(distinct) == 1
        else "mixed"
        if distinct
        else "missing",
        rule=first.rule if first is not None else "",
        per_projection=labels if len(distinct) > 1 else {},
        layout=layout,
        prefix=prefix,
        count=count,
        width=width,
    )


def _layer_policy(
    layer: MoeLayerFacts,
    routed: dict[str, Scheme],
    shared: dict[str, Scheme],
    decision: FseDecision,
    *,
    tp: int,
    ep: bool,
) -> MoeLayerPolicy:
    moe_tp = 1 if ep else tp
    pairs = list(routed.items())
    if decision.enabled:
        pairs += list(shared.items())
    align, why = intermediate_alignment(pairs)
    intermediate = tp_geometry(layer.moe_intermediate_size, moe_tp, align, why)
    shared_geo = None
    if layer.n_shared > 0 and not decision.enabled:
        s_align, s_why = intermediate_alignment(shared.items())
        shared_geo = tp_geometry(layer.shared_intermediate_size, tp, s_align, s_why)
    return MoeLayerPolicy(
        layer=layer.layer,
        prefix=layer.prefix,
        is_mtp=layer.is_mtp,
        n_routed=layer.n_routed,
        n_shared=layer.n_shared,
        top_k=layer.top_k,
        routed=_expert_schemes(
            routed,
            layout=layer.naming.routed_layout,
            prefix=layer.routed_prefix,
            count=layer.n_routed,
            width=layer.moe_intermediate_size,
        ),
        shared=None
        if layer.n_shared <= 0
        else _expert_schemes(
            shared,
            layout=layer.naming.shared_layout,
            prefix=layer.shared_prefix or "",
            count=layer.n_shared,
            width=layer.shared_intermediate_size,
        ),
        fse=decision,
        intermediate=intermediate,
        shared_intermediate=shared_geo,
    )


def _model_summary(catalog: Any, facts: ModelFacts, rc: ResolvedCatalog) -> ModelSummary:
    headers = getattr(catalog, "headers", None) or {}
    if headers:
        data = sum(h.file_size - h.data_start for h in headers.values())
    else:
        data = sum(e.end - e.begin for e in catalog.tensors.values())
    return ModelSummary(
        family=facts.family,
        model_type=facts.model_type,
        hidden_size=facts.hidden_size,
        num_hidden_layers=facts.num_hidden_layers,
        num_mtp_layers=facts.num_mtp_layers,
        num_moe_layers=len(facts.moe_layers),
        quant_method=getattr(rc.qconfig, "source", "none"),
        quant_summary=rc.qconfig.summary() if hasattr(rc.qconfig, "summary") else "",
        tensors=len(catalog.tensors),
        files=len(catalog.files),
        data_bytes=data,
        header_bytes_read=getattr(catalog, "header_bytes_read", 0),
        bytes_transferred=getattr(catalog, "bytes_transferred", None),
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

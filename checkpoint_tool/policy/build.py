"""``decide_policy``: catalog (headers only) -> the ``PolicyDecision`` for the engine options;
``build_policy``: the same, rendered as the ``PolicyReport`` of ``ckpt inspect``.

Steps: resolve every tensor's scheme (``quant.resolve``), derive the model facts, then per MoE
layer: the routed and shared schemes as stored, the FSE decision (vLLM gate, ckpt layout
check, ``--fse`` mode, a previous conversion's slots), the split alignment of the intermediate
dim; then the model-wide rules (the target, parallelism flags, ``--fse on``). Pure apart from
``resolve_catalog`` reading the catalog already in memory: no tensor data is read.

Example::

    decision = decide_policy(open_catalog("/models/quark-hybrid"), tp=2)
    decision.fse_layers()        # {1: False, 2: False, 3: False, 4: False} (stock vLLM fuses none)
    build_policy(open_catalog("/models/quark-hybrid"), tp=2).summary.text
    # 'fused shared experts: enabled on MoE layer(s) []; disabled on MoE layer(s) [1, 2, 3, 4]'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import UsageError
from checkpoint_tool.model import PROJS, MoeLayerFacts, family_of, model_facts
from checkpoint_tool.model.families import loads_fused_experts
from checkpoint_tool.policy.decision import FseDecision, FseMode, LayerDecision, PolicyDecision
from checkpoint_tool.policy.engine.model import Target, load_rule_table
from checkpoint_tool.policy.fse import (
    apply_model_rules,
    decide_layer,
    fse_model,
    prefused_decision,
)
from checkpoint_tool.policy.fse_gates import OK, model_no_fse, vllm_fse_gate
from checkpoint_tool.policy.fse_layout import layout_check
from checkpoint_tool.policy.prefused import prefused_slots
from checkpoint_tool.policy.report import PolicyReport
from checkpoint_tool.policy.to_report import render_report
from checkpoint_tool.policy.tp import intermediate_alignment
from checkpoint_tool.quant.findings import Spread, catalog_findings
from checkpoint_tool.quant.resolve import ResolvedCatalog, resolve_catalog
from checkpoint_tool.quant.scheme import Scheme

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

FSE_MODES = ("auto", "on", "off")


def decide_policy(
    catalog: Catalog,
    *,
    tp: int = 1,
    ep: bool = False,
    eplb: bool = False,
    all2all: str | None = None,
    fse: FseMode = "auto",
    resolved: ResolvedCatalog | None = None,
    target: str | Target | None = None,
) -> PolicyDecision:
    """The per-layer decision of ``catalog`` for ``--tp``/``--ep``/``--eplb``/``--all2all``/
    ``--fse`` on ``target`` (a name, an engine ``Target``, or None: the default target, the
    newest stock vLLM on CUDA; under ``--fse auto`` only what it fuses at load time is fused).
    ``resolved`` may be passed when the caller already resolved the catalog."""
    tgt = target if isinstance(target, Target) else load_rule_table().target(target)
    check_options(tp=tp, ep=ep, eplb=eplb, fse=fse)
    config = catalog.config or {}
    raw_qc = config.get("quantization_config")
    raw_qc = raw_qc if isinstance(raw_qc, dict) else None
    rc = resolved if resolved is not None else resolve_catalog(catalog)
    shapes = None
    if family_of(config) == "generic":
        shapes = {n: e.shape for n, e in catalog.tensors.items()}
    facts = model_facts(config, catalog.tensors, tensor_shapes=shapes)
    prefused = prefused_slots(config)

    verdicts: dict[int, FseDecision] = {}
    stored: dict[int, tuple[dict[str, Scheme], dict[str, Scheme]]] = {}
    for layer in facts.moe_layers:
        routed = _stored_schemes(rc, layer, shared=False)
        shared = _stored_schemes(rc, layer, shared=True)
        stored[layer.layer] = (routed, shared)
        if layer.layer in prefused:
            verdicts[layer.layer] = prefused_decision(
                prefused[layer.layer], layer.shared_chunk_size
            )
            continue
        gate = layout = OK  # no shared experts: nothing to gate
        if layer.n_shared and facts.fse_unsupported:
            gate = model_no_fse(facts.fse_unsupported)
        elif layer.n_shared:
            gate = vllm_fse_gate(rc.qconfig, raw_qc, facts, layer, tgt.version)
            layout = layout_check(layer, routed, shared)
        verdicts[layer.layer] = decide_layer(layer, gate=gate, layout=layout, mode=fse)
    verdicts, option_issues = apply_model_rules(
        verdicts,
        mode=fse,
        ep=ep,
        eplb=eplb,
        all2all=all2all,
        target=tgt,
        models={m.layer: fse_model(m) for m in facts.moe_layers},
    )
    layers = {
        layer.layer: _layer_decision(layer, *stored[layer.layer], verdicts[layer.layer])
        for layer in facts.moe_layers
    }
    return PolicyDecision(
        target=tgt,
        tp=tp,
        ep=ep,
        eplb=eplb,
        all2all=all2all,
        fse_mode=fse,
        facts=facts,
        resolved=rc,
        layers=layers,
        entries=catalog.tensors,
        prefused=prefused,
        option_issues=tuple(option_issues),
    )


def build_policy(
    catalog: Catalog,
    *,
    spread: Spread | None = None,
    **options: Any,
) -> PolicyReport:
    """``decide_policy(catalog, **options)`` rendered as the ``ckpt inspect`` report
    (``render_policy``)."""
    return render_policy(decide_policy(catalog, **options), catalog, spread=spread)


def render_policy(
    decision: PolicyDecision, catalog: Catalog, *, spread: Spread | None = None
) -> PolicyReport:
    """``decision`` rendered as the ``ckpt inspect`` report, with the catalog's scheme
    findings (``quant.findings``). ``spread`` runs the per-module checks (the CLI passes
    ``forked.spread_map``: half of them in a forked child on a large catalog); by default
    they run here."""
    findings = catalog_findings(
        catalog,
        decision.resolved,
        spread=spread,
        fused_native=loads_fused_experts(catalog.config),
    )
    return render_report(decision, catalog, findings)


def check_options(*, tp: int, ep: bool = False, eplb: bool = False, fse: str = "auto") -> None:
    """The engine options every command shares: refused in one place, with one message."""
    if tp < 1:
        raise UsageError(f"--tp must be >= 1, got {tp}")
    if fse not in FSE_MODES:
        raise UsageError(f"--fse must be one of {', '.join(FSE_MODES)}, got {fse!r}")
    if eplb and not ep:
        raise UsageError("--eplb balances experts across EP ranks: it needs --ep")


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
        if t is None and shared:  # compressed-tensors' packed weight
            t = rc.tensors.get(f"{layer.shared_module(proj, 0)}.weight_packed")
        if t is not None:
            out[proj] = t.scheme
    return out


def _layer_decision(
    layer: MoeLayerFacts,
    routed: dict[str, Scheme],
    shared: dict[str, Scheme],
    verdict: FseDecision,
) -> LayerDecision:
    """The split alignments that go with ``verdict``: a fused shared expert's schemes join
    the routed ones; one that stays separate is aligned on its own."""
    pairs = list(routed.items())
    if verdict.enabled:
        pairs += list(shared.items())
    align, why = intermediate_alignment(pairs)
    s_align: int | None = None
    s_why = ""
    if layer.n_shared > 0 and not verdict.enabled:
        s_align, s_why = intermediate_alignment(shared.items())
    return LayerDecision(
        facts=layer,
        fse=verdict,
        routed_alignment=align,
        routed_alignment_from=why,
        shared_alignment=s_align,
        shared_alignment_from=s_why,
        routed_schemes=routed,
        shared_schemes=shared,
    )

"""``plan_with_requant``: a plan whose chosen shared experts are requantized to MXFP4.

1. the layers (``select``), with the errors measured first when a budget is given (``error``);
2. the source viewed as requantized (``view``), planned by the ordinary planner: policy, FSE
   slots on a fusing ``--target``, padding, TP, layouts all see MXFP4 shared experts;
3. every planned piece of a requantized tensor is marked ``requant="mxfp4"`` (its source
   ``<module>.weight`` / ``<module>.weight_scale``: the codes / scales the executor's
   ``execute.requant_node`` makes from the module's source weight), its ops start with ``requantize mxfp4 <- <source format>``, and
   ``config.json["ckpt"]["requantized_shared"]`` records what was done (the manifest hashes
   both: the plan and config.json).

Example::

    plan = plan_with_requant(catalog, PlanOptions(target="vllm-0.33-rocm-aiter-fse"),
                             RequantRequest.parse("mxfp4", "1-2", None))
    plan.fse_layers                  # {1: True, 2: True, 3: False}
    plan.files[0].tensors[5].ops[0]  # 'requantize mxfp4 <- unquantized (Quark 0.13 rounding)'
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.model import model_facts
from checkpoint_tool.plan.model import OutputTensor, Plan, PlanOptions
from checkpoint_tool.quant.requant.scheme import REQUANT
from checkpoint_tool.regions import Piece
from checkpoint_tool.requant.select import RequantRequest, candidate_layers, select_layers
from checkpoint_tool.requant.view import RequantView, requant_view

#: the rounding the quantizer follows, as recorded in plans and config.json
QUANTIZER = "quark-0.13 mxfp4 (scale: even; elements: nearest, ties to even; -0 -> +0)"


def plan_with_requant(
    catalog: Catalog,
    options: PlanOptions,
    request: RequantRequest,
    *,
    recipe: Any = None,
    errors: dict[int, Any] | None = None,
) -> Plan:
    """Plan ``catalog`` with ``request``'s shared experts requantized (module doc).

    ``errors``: layer -> ``error.LayerError`` already measured (else measured here when the
    request has a budget).
    """
    from checkpoint_tool.plan.build import plan_for_catalog

    facts = model_facts(
        catalog.config,
        catalog.tensors,
        tensor_shapes={n: e.shape for n, e in catalog.tensors.items()},
    )
    where = catalog.source or str(catalog.root)
    if errors is None:  # the preview: every candidate layer's cost, measured once
        from checkpoint_tool.requant.error import measure_layers

        wanted = request.layers if isinstance(request.layers, list) else candidate_layers(facts)
        select_layers(RequantRequest(layers=wanted), facts, None, where=where)  # exist at all?
        requant_view(catalog, facts, wanted)  # every module requantizable (headers only)
        errors = measure_layers(catalog, wanted)
    budget = {n: e.moe_rel_error for n, e in (errors or {}).items()}
    layers = select_layers(request, facts, budget, where=where)
    view = requant_view(catalog, facts, layers)
    plan = plan_for_catalog(view.catalog, options, recipe=recipe)
    return finish(plan, view, errors or {})


def finish(plan: Plan, view: RequantView, errors: dict[int, Any]) -> Plan:
    """Mark the pieces of the view's virtual tensors requantized; record the requantization."""
    ops_cache: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {}
    virtual = view.virtual
    for f in plan.files:
        tensors = list(f.tensors)
        changed = False
        for i, t in enumerate(tensors):
            if not any(p.source in virtual for p in t.pieces):
                continue
            changed = True
            module = virtual[next(p.source for p in t.pieces if p.source in virtual)]
            fmt = view.modules[module].source_format
            ops_key = (tuple(t.ops), fmt)
            ops = ops_cache.get(ops_key)
            if ops is None:
                ops = ops_cache[ops_key] = (
                    f"requantize mxfp4 <- {fmt} (Quark 0.13 rounding)",
                    *t.ops,
                )
            pieces = [
                Piece.of(p.source, p.slices, p.pads, REQUANT) if p.source in virtual else p
                for p in t.pieces
            ]
            tensors[i] = OutputTensor(
                t.name, t.dtype, t.shape, pieces, t.combine, t.axis, ops, t.layer, t.fill
            )
        if changed:
            f.tensors = tensors
    provenance: dict[str, list[str]] = {}
    for src, outs in plan.provenance.items():
        key = view.modules[virtual[src]].weight if src in virtual else src
        provenance.setdefault(key, []).extend(outs)
    plan.provenance = provenance
    record = record_of(view, errors)
    if plan.config is not None:
        plan.config.setdefault("ckpt", {})["requantized_shared"] = record
    fused = [n for n in view.layers if plan.fse_layers.get(n)]
    notes = list(view.notes)
    for n in sorted(errors):
        e = errors[n].summary()
        chosen = (
            "requantized"
            if n in view.layers
            else "already MXFP4"
            if n in view.requested
            else "kept"
        )
        notes.append(
            f"requantize: layer {n} ({chosen}): shared expert weight error "
            f"{e['weight_rel_error']:.4g}, MoE output error {e['moe_rel_error']:.4g} "
            f"({e['tokens']} sampled tokens)"
        )
    if view.layers:
        notes.append(
            f"requantize: the shared experts of MoE layer(s) {view.layers} are written as MXFP4 "
            f"({len(view.modules)} projection(s), Quark 0.13 rounding); fused into routed "
            f"slots on {fused or 'none'}"
        )
    plan.notes = [*plan.notes, *notes]
    return plan


def record_of(view: RequantView, errors: dict[int, Any]) -> dict[str, Any]:
    """What ``config.json["ckpt"]["requantized_shared"]`` says (validate and verify read it)."""
    return {
        "scheme": "mxfp4",
        "quantizer": QUANTIZER,
        "layers": list(view.layers),
        "requested": list(view.requested),
        "modules": {
            m.module: {"source": m.source_format, "weight": m.weight, "shape": list(m.shape)}
            for m in sorted(view.modules.values(), key=lambda m: m.module)
        },
        "errors": {str(n): errors[n].summary() for n in sorted(errors)},
    }


def replan_recorded(
    catalog: Catalog, options: PlanOptions, recipe: Any, record: dict[str, Any]
) -> Plan:
    """The plan convert executed, from DST's ``requantized_shared`` record (verify): the same
    layers, the recorded errors (not measured again)."""
    from checkpoint_tool.requant.error import LayerError

    errors = {
        int(n): LayerError(layer=int(n), source="", **e)
        for n, e in (record.get("errors") or {}).items()
    }
    asked = record.get("requested") or record.get("layers") or []
    request = RequantRequest(layers=[int(n) for n in asked])
    return plan_with_requant(catalog, options, request, recipe=recipe, errors=errors)

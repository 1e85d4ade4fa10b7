"""``build_plan``: catalog + policy decision + recipe + options -> the Plan. Pure: no tensor
data read.

Steps: the planner's inputs (``plan.inputs``: experts indexed, FSE settled against the
recipe, the padded intermediate size), every source tensor placed (``plan.outputs``, which
composes the per-kind functions of ``plan.kinds``), files from the layout (``plan.layouts``),
config.json edited (``plan.config_edit``) and checked, the summary. ``plan_for_catalog`` also
picks the recipe and decides the policy, for ``ckpt plan`` and ``ckpt convert``.

Example::

    cat = open_catalog("/models/quark-hybrid")
    plan = plan_for_catalog(cat, PlanOptions(tp=2, max_shard_size=parse_size("5GB")))
    plan.summary.padded, plan.summary.padded_intermediate_size   # (240, 192)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint_tool import __version__
from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog
from checkpoint_tool.plan.config_edit import check_schemes, edit_config, is_exact
from checkpoint_tool.plan.inputs import PlanInputs, plan_inputs
from checkpoint_tool.plan.layouts import get_layout
from checkpoint_tool.plan.model import OutputFile, Plan, PlanOptions
from checkpoint_tool.plan.output_table import Provenance
from checkpoint_tool.plan.outputs import Planned, plan_outputs
from checkpoint_tool.plan.source_label import source_label
from checkpoint_tool.plan.summarize import plan_summary
from checkpoint_tool.policy import decide_policy
from checkpoint_tool.policy.decision import PolicyDecision
from checkpoint_tool.policy.engine.model import Target, load_rule_table
from checkpoint_tool.recipes import Recipe, auto_recipe, load_recipe

#: files of a previous ckpt run that must not be copied as side files
_NOT_SIDE_FILES = {"config.json", INDEX_NAME, "ckpt-manifest.json", ".ckpt-journal.json"}
FSE_ENV = "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS"


def build_plan(
    catalog: Catalog,
    decision: PolicyDecision,
    recipe: Recipe,
    options: PlanOptions,
    *,
    source: str,
) -> Plan:
    """The plan that converts ``catalog`` with ``recipe`` under ``options``; ``decision`` is
    the policy decided for the same ``--tp``/``--fse`` (``policy.decide_policy``); ``source``
    names the source in the plan and the written config (``plan.source_label``)."""
    inputs = plan_inputs(catalog, decision, recipe, options)
    planned = plan_outputs(inputs)
    files = get_layout(options.layout).build_files(inputs, planned)
    renames = {k: sorted(v) for k, v in sorted(planned.module_renames.items())}
    config, config_notes = edit_config(
        catalog.config,
        geometry=inputs.geometry,
        module_renames=renames,
        metadata=_metadata(inputs, source),
        exclude=_unfused_excludes(inputs, planned),
    )
    strict = (
        planned.redirected_modules
        | planned.unfused_modules
        | (set(renames) & _exact_entries(catalog.config))
    )
    provenance: Mapping[str, list[str]] = Provenance(planned.outputs)
    check_notes = check_schemes(
        catalog, inputs.resolved.tensors, config, provenance, set(renames), strict
    )
    if any(f.rank is not None for f in files):  # per-rank layouts: read off the pieces
        provenance = _piece_provenance(files)
    fse_on = sorted(k for k, v in inputs.fse_layers.items() if v)
    notes = [*inputs.notes, *config_notes, *check_notes, *_engine_notes(inputs, fse_on)]
    return Plan(
        ckpt_version=__version__,
        source=source,
        source_revision=catalog.revision,
        recipe=recipe.name if not recipe.origin or recipe.origin == recipe.name else recipe.origin,
        options=options,
        files=files,
        dropped=planned.dropped,
        config=config,
        side_files=[f for f in catalog.side_files if f not in _NOT_SIDE_FILES],
        fse_layers=dict(sorted(inputs.fse_layers.items())),
        provenance=provenance,
        summary=plan_summary(inputs, planned, files),
        notes=notes,
    )


def plan_for_catalog(
    catalog: Catalog,
    options: PlanOptions,
    *,
    recipe: str | Recipe | None = None,
    ep: bool = False,
    source: str | None = None,
) -> Plan:
    """Pick the recipe (``auto_recipe`` unless given), decide the policy for ``options``, name
    the source (``source_label`` unless given) and plan: what ``ckpt plan`` and ``ckpt convert``
    run."""
    if recipe is None:
        chosen = auto_recipe(catalog)
    elif isinstance(recipe, Recipe):
        chosen = recipe
    else:
        chosen = load_recipe(recipe)
    decision = decide_policy(catalog, tp=options.tp, ep=ep, fse=options.fse, target=options.target)
    label = source if source is not None else source_label(catalog)
    return build_plan(catalog, decision, chosen, options, source=label)


def _metadata(inputs: PlanInputs, source: str) -> dict[str, Any]:
    """What ``config.json["ckpt"]`` records about the conversion."""
    geo = inputs.geometry
    o = inputs.options
    meta: dict[str, Any] = {
        "ckpt_version": __version__,
        "source": source,
        "source_revision": inputs.catalog.revision,
        "recipe": inputs.recipe.name,
        "layout": o.layout,
        "tp": o.tp,
        "fse": o.fse,
        "target": inputs.decision.target.name,
        "pad_to": geo.pad_to,
        "moe_intermediate_size": {"source": geo.size, "written": geo.padded},
        "fse_layers": sorted(k for k, v in inputs.fse_layers.items() if v),
        "fse_slots": {
            str(layer.layer): list(range(layer.n_routed, layer.n_routed + layer.n_shared))
            for layer in inputs.facts.moe_layers
            if inputs.fse_layers.get(layer.layer)
        },
    }
    if geo.shared_size is not None:
        meta["shared_expert_intermediate_size"] = {
            "source": geo.shared_size,
            "written": geo.shared_padded,
        }
    if o.layers is not None:
        meta["layers"] = sorted(o.layers)
    return meta


def _piece_provenance(files: list[OutputFile]) -> dict[str, list[str]]:
    """source -> output names, read off the pieces (every rank cuts the same sources under
    the same names, so rank 0's files tell it all)."""
    out: dict[str, dict[str, None]] = {}
    for f in files:
        if f.rank not in (None, 0):
            continue
        for t in f.tensors:
            for p in t.pieces:
                out.setdefault(p.source, {})[t.name] = None
    return {k: list(v) for k, v in sorted(out.items())}


def _unfused_excludes(inputs: PlanInputs, planned: Planned) -> list[str]:
    """FusedMoE modules whose float 3-D experts were unfused but whose per-expert names the
    config would resolve as quantized (Quark's fused-parameter quirk)."""
    from checkpoint_tool.plan.experts import expert_modules
    from checkpoint_tool.quant.resolve import resolve_tensor

    out: set[str] = set()
    modules = expert_modules(inputs.facts) if planned.unfused_modules else {}
    for name in planned.unfused_modules:
        layer = modules[name].layer
        per_expert = f"{layer.routed_prefix}.0.{layer.proj_name('gate')}.weight"
        stored = inputs.resolved.tensors[name].scheme
        configured = resolve_tensor(inputs.resolved.qconfig, per_expert).scheme
        if configured.quantized and not stored.quantized:
            out.add(layer.routed_prefix)
    return sorted(out)


def _exact_entries(config: dict | None) -> set[str]:
    qc = (config or {}).get("quantization_config")
    if not isinstance(qc, dict):
        return set()
    out: set[str] = set()
    for value in qc.values():
        names = value if isinstance(value, list) else value if isinstance(value, dict) else []
        out.update(e for e in names if isinstance(e, str) and is_exact(e))
    return out


def target_of(options: PlanOptions) -> Target:
    """The engine ``Target`` of ``options.target`` (None: the default target)."""
    return load_rule_table().target(options.target)


def serve_settings(target: Target, fse_on: list[int]) -> list[str]:
    """Engine settings the output needs on ``target`` (empty: none), e.g.
    ``["VLLM_ROCM_USE_AITER=1", "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1"]``."""
    return list(target.env) if fse_on and target.fuses else []


def _engine_notes(inputs: PlanInputs, fse_on: list[int]) -> list[str]:
    notes = []
    target = inputs.decision.target
    if fse_on and not target.fuses:
        notes.append(
            f"shared experts were written as routed slots on MoE layer(s) {fse_on} (--fse on), "
            f"but {target.name} does not fuse shared experts: the output does not load there "
            f"(KeyError on experts.{{n_routed + j}}); serve it with {FSE_ENV}=1 on ROCm "
            "(--target vllm-0.33-rocm-aiter-fse) or convert with --fse auto"
        )
    elif fse_on:
        notes.append(
            f"shared experts were written as routed slots on MoE layer(s) {fse_on}: serve with "
            f"{' '.join(target.env)} ({target.name}); without FSE the slots "
            "experts.{n_routed + j} do not load (an error, not a silent drop)"
        )
    if inputs.options.layers is not None:
        notes.append(
            f"partial conversion: only layers {sorted(inputs.options.layers)} are written; the "
            "output is for inspection and verification, not for serving"
        )
    return notes

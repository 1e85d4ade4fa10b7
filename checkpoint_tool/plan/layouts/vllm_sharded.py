"""The ``vllm-sharded`` layout: per-TP-rank files vLLM loads with ``--load-format sharded_state``.

Driven by the engine target spec (``checkpoint_tool/targets/<target>/<family>.yaml``): every
parameter the engine's model registers is built for every rank from the planned HF-layout
tensors (``plan.outputs``: renamed, FSE-redirected, padded), so the FSE chunking, padding and
rename rules are the HF layout's own. Linears are merged and TP-sliced (``vllm_params``),
routed experts stacked into ``w13_*``/``w2_*`` (``vllm_moe``), vocab tables padded and split,
engine buffers written as constants. Keys are the state-dict keys the loader keeps (smallest
alias). Files: ``model-rank-{rank}-part-{part}.safetensors``, parts balanced at
``--max-shard-size``, no index; config.json, side files and the manifest as for ``hf``.

Every planned tensor is used, or dropped by a named rule (MTP layers: the draft model's), or
the plan fails naming it; a tensor the engine needs but the checkpoint lacks fails the plan
naming the tensor.

Example::

    files = build_files(ctx, planned)        # PlanOptions(tp=2, layout="vllm-sharded")
    [(f.rank, f.name) for f in files]
    # [(0, 'model-rank-0-part-0.safetensors'), (1, 'model-rank-1-part-0.safetensors')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import InputError, UsageError, first_few
from checkpoint_tool.formats import Format, format_of
from checkpoint_tool.plan.inputs import layer_of
from checkpoint_tool.plan.layouts.planned_index import PlannedIndex
from checkpoint_tool.plan.layouts.vllm_linear import linear_params
from checkpoint_tool.plan.layouts.vllm_moe import moe_params
from checkpoint_tool.plan.layouts.vllm_params import Param, ParamBuilder
from checkpoint_tool.plan.model import DroppedTensor, OutputFile, output_nbytes
from checkpoint_tool.plan.sharding import shard
from checkpoint_tool.targets import DEFAULT_TARGET, load_spec
from checkpoint_tool.targets.instance import ModelInstance, instantiate
from checkpoint_tool.targets.keys import KeyResolver
from checkpoint_tool.targets.spec import TargetSpec

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.plan.inputs import PlanInputs
    from checkpoint_tool.plan.outputs import Planned

from checkpoint_tool.plan.outputs import OutputFacts

MTP_RULE = "vllm_sharded_mtp"


def engine_config(ctx: PlanInputs) -> dict[str, Any]:
    """config.json as the engine will read it (the padded expert intermediate size)."""
    config = dict(ctx.catalog.config or {})
    if ctx.geometry.padded is not None:
        config["moe_intermediate_size"] = ctx.geometry.padded
    return config


def quant_family(catalog: Catalog) -> str | None:
    """The vLLM quantization config family serving ``catalog``, for spec expressions:
    ``"modelopt"`` (hf_quant_config.json, or a ``modelopt*`` quant_method), else config.json's
    ``quantization_config.quant_method`` lower-cased (``"fp8"``, ``"quark"``), else None."""
    qc = (catalog.config or {}).get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    if catalog.hf_quant_config or (
        isinstance(method, str) and method.lower().startswith("modelopt")
    ):
        return "modelopt"
    return method.lower() if isinstance(method, str) else None


def model_instance(ctx: PlanInputs, target: str = DEFAULT_TARGET) -> ModelInstance:
    """The target spec of ``ctx``'s model family applied to its (padded) config."""
    archs = (ctx.catalog.config or {}).get("architectures") or []
    family = quant_family(ctx.catalog)
    if family == "compressed-tensors":
        raise UsageError(
            f"{ctx.catalog.root}: --layout vllm-sharded has no spec for compressed-tensors "
            "parameters (w13_weight_packed, w13_weight_global_scale, ...): use --layout hf"
        )
    spec = load_spec(ctx.facts.family, target, [str(a) for a in archs])
    names = {**engine_config(ctx), "quant_family": family}
    inst = instantiate(spec, names, ctx.fse_layers)
    wanted = ctx.options.layers
    if wanted is not None:  # partial conversion: only those layers, no global tensors
        keep = set(wanted)
        inst.vocabs = []
        inst.linears = [s for s in inst.linears if s.layer in keep]
        inst.params = [s for s in inst.params if s.layer in keep]
        inst.moes = [s for s in inst.moes if s.layer in keep]
        inst.buffers = [s for s in inst.buffers if s.layer in keep]
    return inst


def build_files(ctx: PlanInputs, planned: Planned) -> list[OutputFile]:
    """Per-rank files of every engine parameter (see the module docstring). A full-size
    plan allocates ~10^6 small acyclic objects here: the commands run planning with the cycle
    collector paused (``cli.session.opened``), a library caller may do the same."""
    _check_options(ctx)
    inst = model_instance(ctx)
    spec = inst.spec
    index = PlannedIndex(ctx, planned)
    _drop_mtp(index, planned, inst.num_layers)
    builder = ParamBuilder(spec, KeyResolver(spec), index, ctx.options.tp)
    params: list[Param] = []
    for vocab in inst.vocabs:
        params += builder.vocab(vocab)
    for site in inst.params:
        params += builder.params(site)
    for linear in inst.linears:
        params += linear_params(builder, linear)
    facts = {layer.layer: layer for layer in ctx.facts.moe_layers}
    for moe in inst.moes:
        if moe.layer not in facts:
            raise InputError(
                f"{ctx.catalog.root}: config.json makes layer {moe.layer} a MoE layer but the "
                "checkpoint has no experts there; the checkpoint and its config disagree"
            )
        params += moe_params(builder, moe, facts[moe.layer])
    params += [builder.buffer(b) for b in inst.buffers]
    _check_leftovers(ctx, index, spec)
    _check_unique(params)
    _record(planned, index, params)
    _notes(ctx, spec, index, inst)
    return rank_files(params, spec, ctx.options.tp, ctx.options.max_shard_size)


def rank_files(params: list[Param], spec: TargetSpec, tp: int, max_bytes: int) -> list[OutputFile]:
    """Each rank's tensors in balanced parts named by ``spec.files.pattern``."""
    files = []
    for rank in range(tp):
        parts = shard([p.ranks[rank] for p in params], max_bytes)
        for part, f in enumerate(parts):
            name = spec.files.pattern.format(rank=rank, part=part)
            files.append(OutputFile(name=name, tensors=f.tensors, nbytes=f.nbytes, rank=rank))
    return files


def _check_options(ctx: PlanInputs) -> None:
    if ctx.decision.ep:
        raise UsageError(
            "--layout vllm-sharded writes tensor-parallel shards; expert parallelism (--ep) "
            "places experts per rank differently: use --layout hf with --ep"
        )


def _drop_mtp(index: PlannedIndex, planned: Planned, num_layers: int) -> None:
    """Layers past the main model's (MTP) belong to the draft model: drop them by rule."""
    for t in list(index.by_name.values()):
        layer = layer_of(t.name)
        if layer is None or layer < num_layers:
            continue
        index.drop(t.name)
        for source in dict.fromkeys(p.source for p in t.pieces):
            planned.dropped.append(
                DroppedTensor(
                    name=source,
                    rule=MTP_RULE,
                    reason=(
                        f"layer {layer} >= num_hidden_layers {num_layers}: an MTP layer, loaded "
                        "by vLLM's DeepSeekMTP draft model, not part of the main model's state"
                    ),
                )
            )


def _check_leftovers(ctx: PlanInputs, index: PlannedIndex, spec: TargetSpec) -> None:
    left = index.unused()
    if left:
        raise InputError(
            f"{ctx.catalog.root}: {len(left)} tensor(s) have no parameter in vLLM's "
            f"{spec.family} model ({spec.target}): {first_few(left)}; drop them "
            "with a recipe rule (--recipe PATH) or use --layout hf"
        )


def _check_unique(params: list[Param]) -> None:
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise InputError(f"target spec: parameter {p.name} is built twice; fix the spec")
        seen.add(p.name)


def _record(planned: Planned, index: PlannedIndex, params: list[Param]) -> None:
    """Report bookkeeping under the output names (kinds, padded, experts, bytes)."""
    for p in params:
        kinds = {index.kind(n) for n in p.planned}
        if "redirected" in kinds:
            kind = "redirected"
        elif p.planned == [p.name] and kinds <= {"kept"}:
            kind = "kept"
        else:
            kind = "renamed"
        planned.built[p.name] = OutputFacts(kind, p.padded, p.expert, output_nbytes(p.ranks[0]))


def _notes(ctx: PlanInputs, spec: TargetSpec, index: PlannedIndex, inst: ModelInstance) -> None:
    formats: dict[str, Format] = {}
    for site in inst.moes:
        weight = index.get(f"{site.vllm.rsplit('.', 1)[0]}.0.gate_proj.weight")
        if weight is not None:
            fmt = format_of(index.scheme(weight))
            formats[fmt.name] = fmt
    if ctx.geometry.padded is not None:
        for fmt in formats.values():  # the routed experts' formats, first seen first
            note = fmt.sharded_note(ctx.geometry.padded // ctx.options.tp)
            if note is not None:
                ctx.notes.append(note)

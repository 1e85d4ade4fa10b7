"""Every source tensor -> its output tensor(s) or a reasoned drop (names, pieces, shapes).

One pass over the catalog, in name order. For each tensor:

1. outside ``--layers``: dropped (rule ``layers``);
2. the recipe's drop rules;
3. a shared-expert tensor of an FSE layer: one output per routed slot (``plan.fse``), each
   chunk padded to the padded intermediate size;
4. any other expert tensor: padded to the padded intermediate size (routed) or to the padded
   shared width (shared experts that stay shared);
5. everything else: copied whole.

Names go through the recipe's rules (``RuleSet.rename``); the result is checked for
collisions (two sources, one name), unmatched tensors and, when the loader re-applies the
rules, names it would rename again.

Example::

    planned = plan_outputs(ctx)
    planned.tensors[0]
    # OutputTensor(name='model.embed_tokens.weight', dtype='BF16', shape=[512, 256],
    #              pieces=[Piece(source='model.embed_tokens.weight')], ops=['copy'])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from checkpoint_tool.catalog.safetensors_format import storage_shape, tensor_nbytes
from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.plan.context import PlanContext, layer_of
from checkpoint_tool.plan.experts import ExpertPart
from checkpoint_tool.plan.fse import chunks
from checkpoint_tool.plan.model import DroppedTensor, OutputTensor, Piece, Region
from checkpoint_tool.plan.pieces import Placement, place
from checkpoint_tool.quant.resolve import split_tensor_name
from checkpoint_tool.recipes import Renamed

_SHOW = 5


@dataclass
class Planned:
    """Output tensors (not yet grouped into files) and the bookkeeping reports need."""

    tensors: list[OutputTensor] = field(default_factory=list)
    dropped: list[DroppedTensor] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    #: output name -> "kept" | "renamed" | "redirected" | "unfused"
    kinds: dict[str, str] = field(default_factory=dict)
    padded: set[str] = field(default_factory=set)
    #: output names of expert tensors (TP-split by the engine), for per-rank estimates
    experts: set[str] = field(default_factory=set)
    #: source module -> output modules it was renamed/redirected to (config edits)
    module_renames: dict[str, set[str]] = field(default_factory=dict)
    #: source modules redirected into routed slots (FSE)
    redirected_modules: set[str] = field(default_factory=set)
    #: 3-D fused expert tensors written as one tensor per expert (their names)
    unfused_modules: set[str] = field(default_factory=set)
    #: output name -> tensor data bytes
    nbytes: dict[str, int] = field(default_factory=dict)


def plan_outputs(ctx: PlanContext) -> Planned:
    """Place every source tensor of ``ctx.catalog`` (see the module docstring)."""
    out = Planned()
    wanted = set(ctx.options.layers) if ctx.options.layers is not None else None
    unmatched: list[str] = []
    sources: dict[str, tuple[str, Renamed]] = {}
    for name in sorted(ctx.catalog.tensors):
        if wanted is not None and layer_of(name) not in wanted:
            out.dropped.append(
                DroppedTensor(
                    name=name,
                    rule="layers",
                    reason=f"outside --layers {','.join(map(str, sorted(wanted)))}",
                )
            )
            continue
        drop = ctx.rules.drop_reason(name)
        if drop is not None:
            out.dropped.append(DroppedTensor(name=name, rule=drop[0], reason=drop[1]))
            continue
        for renamed, placement, part in _place(ctx, name):
            if not renamed.matched:
                unmatched.append(name)
            assert renamed.name is not None
            if renamed.name in sources:
                other, prev = sources[renamed.name]
                raise InputError(
                    f"{ctx.catalog.root}: tensors {other!r} and {name!r} would both be written as "
                    f"{renamed.name!r} (rules {', '.join(prev.steps) or 'none'} / "
                    f"{', '.join(renamed.steps) or 'none'}); add a drop rule for one of them "
                    "in a recipe file (--recipe PATH)"
                )
            sources[renamed.name] = (name, renamed)
            _record(ctx, out, name, renamed, placement, part)
    if unmatched:
        more = f" (and {len(unmatched) - _SHOW} more)" if len(unmatched) > _SHOW else ""
        raise InputError(
            f"{ctx.catalog.root}: {len(unmatched)} tensor(s) match no rule of recipe "
            f"{ctx.recipe.name}: {', '.join(unmatched[:_SHOW])}{more}; give the right "
            "--recipe, or add drop/keep/accept rules in a recipe file (--recipe PATH)"
        )
    if ctx.recipe.loader_reapplies_rules:
        _check_fixed_points(ctx, sources)
    return out


def _place(ctx: PlanContext, name: str) -> list[tuple[Renamed, Placement, ExpertPart | None]]:
    entry = ctx.catalog.tensors[name]
    rt = ctx.resolved.tensors[name]
    part = ctx.experts.get(name)
    is_scale = rt.role == "scale"
    if part is None:
        renamed = ctx.rules.rename(name, scheme=rt.scheme, is_scale=is_scale, drop_checked=True)
        return [(renamed, _copy(entry), None)]
    geo = ctx.geometry
    layer = part.layer
    if part.fused_3d:
        return _unfuse(ctx, name, part)
    if part.kind == "shared" and ctx.fse_layers.get(layer.layer, False):
        results = []
        suffix = split_tensor_name(name)[1] if not part.fused_3d else ""
        source_width = (
            layer.shared_chunk_size if part.index is not None else layer.shared_intermediate_size
        )
        for chunk in chunks(name, suffix, part, len(entry.shape)):
            placement = _expert_placement(
                ctx, name, part, chunk.ranges, geo.routed_target(), source_width
            )
            op = f"fse_redirect layer {layer.layer}: shared"
            op += f" chunk {chunk.j}/{chunk.n}" if chunk.n > 1 else ""
            placement.ops.insert(0, f"{op} -> routed slot {chunk.slot}")
            renamed = ctx.rules.rename(
                name,
                redirect_to=chunk.target,
                scheme=rt.scheme,
                is_scale=is_scale,
                drop_checked=True,
            )
            results.append((renamed, placement, part))
        return results
    if not geo.pads:  # nothing to cut or pad: the common case of a TP-aligned checkpoint
        return [
            (
                ctx.rules.rename(name, scheme=rt.scheme, is_scale=is_scale, drop_checked=True),
                _copy(entry),
                part,
            )
        ]
    if part.kind == "routed":
        width = layer.moe_intermediate_size
        target = geo.routed_target()
    else:
        width = (
            layer.shared_chunk_size if part.index is not None else layer.shared_intermediate_size
        )
        target = geo.shared_target(layer.n_shared, width)
    ranges = [(k * width, (k + 1) * width) for k in range(part.segments)]
    placement = _expert_placement(ctx, name, part, ranges, target, width)
    renamed = ctx.rules.rename(name, scheme=rt.scheme, is_scale=is_scale, drop_checked=True)
    return [(renamed, placement, part)]


def _unfuse(
    ctx: PlanContext, name: str, part: ExpertPart
) -> list[tuple[Renamed, Placement, ExpertPart | None]]:
    """A 3-D fused expert parameter (``experts.gate_up_proj`` [E, 2I, H] / ``experts.down_proj``
    [E, H, I], as Quark leaves them) -> one HF tensor per expert and projection
    (``experts.{e}.gate_proj.weight`` ...), padded like every routed expert: the layout vLLM's
    DeepSeek loader reads."""
    entry = ctx.catalog.tensors[name]
    rt = ctx.resolved.tensors[name]
    layer = part.layer
    storage = _storage(entry)
    if len(storage) != 3 or storage[0] != layer.n_routed:
        raise InputError(
            f"{entry.file}: fused expert tensor {name!r} has shape {list(entry.shape)}, expected "
            f"[{layer.n_routed}, ...] (one row per routed expert); the checkpoint and "
            "config.json disagree"
        )
    codec = ctx.codec(rt.scheme)
    logical = tuple(codec.logical_shape(storage))
    width, target = layer.moe_intermediate_size, ctx.geometry.routed_target()
    size = logical[part.dim % 3]
    if size != width * part.segments:
        raise InputError(
            f"{entry.file}: tensor {name!r} has intermediate size {size} on dim {part.dim}, "
            f"config.json says {width * part.segments}; the config and the checkpoint disagree"
        )
    projs = [("gate", 0), ("up", 1)] if part.proj == "gate_up" else [("down", 0)]
    results: list[tuple[Renamed, Placement, ExpertPart | None]] = []
    for proj, k in projs:
        template = place(
            entry, rt.role, codec, logical, part.dim, [(k * width, (k + 1) * width)], target
        )
        for e in range(layer.n_routed):
            first = Region(dim=0, start=e, stop=e + 1)
            pieces = [
                Piece(source=name, slices=[first, *p.slices], pads=p.pads) for p in template.pieces
            ]
            ops = [f"unfuse expert {e} {proj} from the 3-D tensor"]
            if template.padded:
                ops.append(
                    f"pad intermediate {width} -> {target} (+{target - width}, zero weights)"
                )
            placement = Placement(
                pieces=pieces,
                combine=template.combine,
                axis=template.axis,
                shape=template.shape[1:],
                padded=template.padded,
                ops=ops,
            )
            per_expert = f"{layer.routed_prefix}.{e}.{layer.proj_name(proj)}.weight"  # type: ignore[arg-type]
            renamed = ctx.rules.rename(
                per_expert, scheme=rt.scheme, is_scale=False, drop_checked=True
            )
            results.append((replace(renamed, source=name, unfused=True), placement, part))
    return results


def _copy(entry) -> Placement:  # type: ignore[no-untyped-def]
    """The source tensor as it is (the common case: built lean, ~90k times for R1)."""
    return Placement([Piece(source=entry.name)], shape=list(entry.shape), ops=["copy"], copy=True)


def _expert_placement(
    ctx: PlanContext,
    name: str,
    part: ExpertPart,
    ranges: list[tuple[int, int]],
    target: int,
    source_width: int,
) -> Placement:
    """Cut ``ranges`` of the intermediate dim out of ``name`` and pad each to ``target``.

    ``source_width``: the intermediate size of one segment of the source tensor (its dim
    holds ``part.segments`` of them).
    """
    entry = ctx.catalog.tensors[name]
    rt = ctx.resolved.tensors[name]
    width = ranges[0][1] - ranges[0][0]
    whole_ranges = [(k * source_width, (k + 1) * source_width) for k in range(part.segments)]
    if ranges == whole_ranges and target == width:
        return _copy(entry)  # nothing to cut or pad (also skips the codec entirely)
    weight = ctx.weight_of(rt.module)
    if weight is None:
        raise InputError(
            f"{ctx.catalog.root}: tensor {name!r} belongs to expert module {rt.module!r}, which "
            "has no weight tensor; the checkpoint is incomplete"
        )
    w_entry = ctx.catalog.tensors[weight]
    w_scheme = ctx.resolved.tensors[weight].scheme
    codec = ctx.codec(w_scheme)
    # experts of a layer share shapes: place one, reuse its regions/pads for the others
    key = (
        rt.role,
        entry.dtype,
        entry.shape,
        w_entry.shape,
        id(codec),
        part.dim,
        part.proj == "down",
        tuple(ranges),
        target,
    )
    template = ctx.placements.get(key)
    if template is not None:
        return Placement(
            pieces=[Piece(source=name, slices=p.slices, pads=p.pads) for p in template.pieces],
            combine=template.combine,
            axis=template.axis,
            shape=list(template.shape),
            padded=template.padded,
            ops=list(template.ops),
        )
    logical = tuple(codec.logical_shape(_storage(w_entry)))
    size = logical[part.dim % len(logical)]
    expected = source_width * part.segments
    if size != expected:
        raise InputError(
            f"{w_entry.file}: tensor {weight!r} has intermediate size {size} on dim {part.dim}, "
            f"config.json says {expected}; the config and the checkpoint disagree"
        )
    placement = place(
        entry,
        rt.role,
        codec,
        logical,
        part.dim,
        ranges,
        target,
        on_intermediate_bias=part.proj != "down",
    )
    if placement.padded:
        amount = target - width
        what = "zero weights" if rt.role == "weight" else "neutral scales"
        placement.ops.append(f"pad intermediate {width} -> {target} (+{amount}, {what})")
    elif placement.pieces[0].slices or len(placement.pieces) > 1:
        placement.ops.append(f"slice intermediate {ranges}")
    else:
        placement.ops.append("copy")
    ctx.placements[key] = placement
    return placement


def _storage(entry) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    return storage_shape(entry.dtype, entry.shape, name=entry.name)


def _record(
    ctx: PlanContext,
    out: Planned,
    source: str,
    renamed: Renamed,
    placement: Placement,
    part: ExpertPart | None,
) -> None:
    entry = ctx.catalog.tensors[source]
    name = renamed.name
    assert name is not None
    if name == source:
        kind = "kept"
        ops = placement.ops
        if renamed.kept:
            ops = [*ops, f"keep ({renamed.steps[-1]})"]
    elif renamed.unfused:
        kind = "unfused"
        ops = placement.ops
        out.unfused_modules.add(source)
    else:
        ops = placement.ops[:]
        kind = "redirected" if renamed.redirected else "renamed"
        rule_steps = [s for s in renamed.steps if s != "fse"]
        if renamed.kept:
            ops.append(f"keep ({rule_steps[-1]})")
        elif rule_steps:
            ops.append(f"rename ({', '.join(rule_steps)})")
    tensor = OutputTensor(
        name=name,
        dtype=entry.dtype,
        shape=placement.shape,
        pieces=placement.pieces,
        combine=placement.combine,  # type: ignore[arg-type]
        axis=placement.axis,
        ops=ops,
        layer=part.layer.layer if part is not None else None,
    )
    out.tensors.append(tensor)
    out.nbytes[name] = (
        entry.nbytes if placement.copy else tensor_nbytes(entry.dtype, tuple(placement.shape))
    )
    out.provenance.setdefault(source, []).append(name)
    out.kinds[name] = kind
    if placement.padded:
        out.padded.add(name)
    if part is not None:
        out.experts.add(name)
    if name != source:
        src_module = ctx.resolved.tensors[source].module
        out_module = split_tensor_name(name)[0] if src_module != source else name
        if out_module != src_module:
            out.module_renames.setdefault(src_module, set()).add(out_module)
        if renamed.redirected:
            out.redirected_modules.add(src_module)


def _check_fixed_points(ctx: PlanContext, sources: dict[str, tuple[str, Renamed]]) -> None:
    """The loader applies the rename rules again: it must end up where ckpt meant it to."""
    for name, (source, renamed) in sources.items():
        if renamed.kept:
            continue
        again = ctx.rules.loader_view(name)
        if again != renamed.engine_name:
            raise UsageError(
                f"recipe {ctx.recipe.name}: {source!r} is written as {name!r}, which the loader "
                f"renames again to {again!r} instead of {renamed.engine_name!r}; mark the rule "
                "that is not idempotent `at_load: true` in the recipe"
            )

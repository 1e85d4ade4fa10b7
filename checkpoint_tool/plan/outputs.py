"""Every source tensor -> its output tensor(s) or a reasoned drop (names, pieces, shapes).

One pass over the catalog, in name order. For each tensor:

1. outside ``--layers``: dropped (rule ``layers``);
2. the recipe's drop rules;
3. a 3-D fused expert tensor: ``unfuse`` (one tensor per expert and projection);
4. a shared-expert tensor of an FSE layer: ``redirect`` (one output per routed slot, each
   chunk padded to the padded intermediate size);
5. any other expert tensor: ``pad`` to the padded intermediate size (routed) or to the padded
   shared width (shared experts that stay shared), or ``keep`` when nothing pads;
6. everything else: ``keep``.

The kinds are pure functions (``plan.kinds``); this module picks one per tensor, names the
outputs through the recipe's rules (``RuleSet.rename``), and checks the result: collisions
(two sources, one name), unmatched tensors and, when the loader re-applies the rules, names
it would rename again.

Example::

    planned = plan_outputs(inputs)
    planned.tensors[0]
    # OutputTensor(name='model.embed_tokens.weight', dtype='BF16', shape=(512, 256),
    #              pieces=(Piece(source='model.embed_tokens.weight'),), ops=('copy',))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.catalog.safetensors_format import storage_shape, tensor_nbytes
from checkpoint_tool.errors import InputError, UsageError, first_few
from checkpoint_tool.plan.experts import ExpertPart
from checkpoint_tool.plan.inputs import PlanInputs, layer_of
from checkpoint_tool.plan.kinds import (
    PlacementCache,
    check_intermediate,
    keep,
    pad,
    redirect,
    unfuse,
)
from checkpoint_tool.plan.model import DroppedTensor, OutputTensor
from checkpoint_tool.plan.pieces import Placement
from checkpoint_tool.quant.resolve import ResolvedTensor, split_tensor_name
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.recipes import Renamed


@dataclass
class Planned:
    """Output tensors (not yet grouped into files) and the bookkeeping reports need."""

    tensors: list[OutputTensor] = field(default_factory=list)
    dropped: list[DroppedTensor] = field(default_factory=list)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    #: output name -> "renamed" | "redirected" | "unfused" (absent: "kept")
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

    def kind(self, name: str) -> str:
        return self.kinds.get(name, "kept")


#: an output: its name (the recipe's rules applied) and how its bytes are made
Placed = tuple[Renamed, Placement]


def plan_outputs(inputs: PlanInputs) -> Planned:
    """Place every source tensor of ``inputs.catalog`` (see the module docstring)."""
    out = Planned()
    wanted = set(inputs.options.layers) if inputs.options.layers is not None else None
    unmatched: list[str] = []
    sources: dict[str, tuple[str, Renamed]] = {}
    rules = inputs.rules
    cutter = _Cutter(inputs)
    ops_cache: dict[tuple, tuple[str, ...]] = {}
    experts_get = inputs.experts.get
    resolved = inputs.resolved.tensors
    rename = rules.rename
    aligned = not inputs.geometry.pads
    # one record per source tensor, made here from the table in name order
    for entry in inputs.catalog.table.entries_by_name():
        name = entry.name
        if wanted is not None and layer_of(name) not in wanted:
            where = ",".join(map(str, sorted(wanted)))
            out.dropped.append(
                DroppedTensor(name=name, rule="layers", reason=f"outside --layers {where}")
            )
            continue
        drop = rules.drop_reason(name)
        if drop is not None:
            out.dropped.append(DroppedTensor(name=name, rule=drop[0], reason=drop[1]))
            continue
        part = experts_get(name)
        if part is None or (aligned and part.kind == "routed" and not part.fused_3d):
            placed = _kept(rename, name, resolved[name], entry)
        else:
            placed = _place(inputs, entry, part, cutter)
        for renamed, placement in placed:
            if not renamed.matched:
                unmatched.append(name)
            assert renamed.name is not None
            if renamed.name in sources:
                other, prev = sources[renamed.name]
                raise InputError(
                    f"{inputs.catalog.root}: tensors {other!r} and {name!r} would both be "
                    f"written as {renamed.name!r} (rules {', '.join(prev.steps) or 'none'} / "
                    f"{', '.join(renamed.steps) or 'none'}); add a drop rule for one of them "
                    "in a recipe file (--recipe PATH)"
                )
            sources[renamed.name] = (name, renamed)
            _record(inputs, out, entry, renamed, placement, part, ops_cache)
    if unmatched:
        raise InputError(
            f"{inputs.catalog.root}: {len(unmatched)} tensor(s) match no rule of recipe "
            f"{inputs.recipe.name}: {first_few(unmatched)}; give the right "
            "--recipe, or add drop/keep/accept rules in a recipe file (--recipe PATH)"
        )
    if inputs.recipe.loader_reapplies_rules:
        _check_fixed_points(inputs, sources)
    return out


def _kept(
    rename: Callable[..., Renamed], name: str, rt: ResolvedTensor, entry: TensorEntry
) -> list[Placed]:
    """A tensor written as it is (no expert, or a routed expert that needs no padding): the
    recipe's name for it and a ``keep``. The fast path of the loop: ~90k tensors of a
    full-size model take it, so ``plan_outputs`` binds ``rename`` once and calls it here."""
    renamed = rename(name, scheme=rt.scheme, is_scale=rt.role == "scale", drop_checked=True)
    return [(renamed, keep(entry))]


def _place(
    inputs: PlanInputs, entry: TensorEntry, part: ExpertPart, cutter: _Cutter
) -> list[Placed]:
    """Which kind applies to expert tensor ``entry``, its placement(s), and the name(s) they
    are written as (a tensor of no expert is a ``keep``, decided by the caller)."""
    name = entry.name
    rt = cutter.resolved[name]
    is_scale = rt.role == "scale"
    rename = partial(inputs.rules.rename, scheme=rt.scheme, drop_checked=True)
    geo = inputs.geometry
    layer = part.layer
    if part.fused_3d:
        placed = unfuse(entry, rt.role, inputs.codec(rt.scheme), part, target=geo.routed_target())
        return [
            (replace(rename(per_expert, is_scale=False), source=name, unfused=True), p)
            for per_expert, p in placed
        ]
    fused = part.kind == "shared" and inputs.fse_layers.get(layer.layer, False)
    if not fused and not geo.pads:  # nothing to cut or pad: a TP-aligned checkpoint
        return [(rename(name, is_scale=is_scale), keep(entry))]
    if part.kind == "routed":
        width = layer.moe_intermediate_size
    elif part.index is not None:
        width = layer.shared_chunk_size
    else:
        width = layer.shared_intermediate_size
    if fused:
        target = geo.routed_target()
        chunked = redirect(
            entry,
            split_tensor_name(name)[1],
            part,
            lambda ranges: cutter.cut(entry, rt, part, ranges, target, width),
        )
        return [
            (rename(name, redirect_to=chunk.target, is_scale=is_scale), p) for chunk, p in chunked
        ]
    target = (
        geo.routed_target() if part.kind == "routed" else geo.shared_target(layer.n_shared, width)
    )
    ranges = cutter.whole(width, part.segments)
    return [(rename(name, is_scale=is_scale), cutter.cut(entry, rt, part, ranges, target, width))]


class _Cutter:
    """``pad`` for expert tensors: the module's weight gives the codec and the logical shape;
    logical shapes and placements are looked up once per distinct value."""

    def __init__(self, inputs: PlanInputs) -> None:
        self.inputs = inputs
        self.tensors = inputs.catalog.tensors
        self.resolved = inputs.resolved.tensors
        self.cache: PlacementCache = {}
        #: the last weight scheme seen and its codec: the experts of a layer share one Scheme
        #: object (the resolver's cache), so consecutive tensors skip the codec lookup
        self.scheme: Scheme | None = None
        self.codec: StorageFormat | None = None
        self.logical: dict[tuple, tuple[int, ...]] = {}
        self._whole: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def whole(self, width: int, segments: int) -> list[tuple[int, int]]:
        """The ranges of a whole expert tensor: ``segments`` blocks of ``width`` (read-only)."""
        ranges = self._whole.get((width, segments))
        if ranges is None:
            ranges = self._whole[width, segments] = [
                (k * width, (k + 1) * width) for k in range(segments)
            ]
        return ranges

    def cut(
        self,
        entry: TensorEntry,
        rt: ResolvedTensor,
        part: ExpertPart,
        ranges: list[tuple[int, int]],
        target: int,
        width: int,
    ) -> Placement:
        weight = self.inputs.weight_of(rt.module)
        if weight is None:
            raise InputError(
                f"{self.inputs.catalog.root}: tensor {entry.name!r} belongs to expert module "
                f"{rt.module!r}, which has no weight tensor; the checkpoint is incomplete"
            )
        # the weight's record: this one, or made from the table (the scales of a module)
        w_entry = entry if weight == entry.name else self.tensors[weight]
        scheme = self.resolved[weight].scheme
        if scheme is not self.scheme or self.codec is None:
            self.scheme, self.codec = scheme, self.inputs.codec(scheme)
        codec = self.codec
        key = (codec, w_entry.dtype, w_entry.shape)
        logical = self.logical.get(key)
        if logical is None:
            storage = storage_shape(w_entry.dtype, w_entry.shape, name=weight)
            logical = self.logical[key] = tuple(codec.logical_shape(storage))
        check_intermediate(w_entry, part, logical[part.dim % len(logical)], width * part.segments)
        return pad(
            entry,
            rt.role,
            codec,
            logical,
            part,
            ranges,
            target=target,
            width=width,
            cache=self.cache,
        )


def _record(
    inputs: PlanInputs,
    out: Planned,
    entry: TensorEntry,
    renamed: Renamed,
    placement: Placement,
    part: ExpertPart | None,
    ops_cache: dict[tuple, tuple[str, ...]],
) -> None:
    source = entry.name
    name = renamed.name
    assert name is not None
    if name != source:
        out.kinds[name] = (
            "unfused" if renamed.unfused else "redirected" if renamed.redirected else "renamed"
        )
        if renamed.unfused:
            out.unfused_modules.add(source)
    how = "same" if name == source else "unfused" if renamed.unfused else "renamed"
    key = (placement.ops, renamed.steps, renamed.kept, how)
    ops = ops_cache.get(key)  # one tuple per distinct history: shared by thousands of tensors
    if ops is None:
        ops = ops_cache[key] = _ops(placement.ops, renamed, how)
    out.tensors.append(
        OutputTensor(
            name,
            entry.dtype,
            placement.shape,
            placement.pieces,
            placement.combine,  # type: ignore[arg-type]
            placement.axis,
            ops,
            part.layer.layer if part is not None else None,
        )
    )
    out.nbytes[name] = (
        entry.nbytes if placement.copy else tensor_nbytes(entry.dtype, tuple(placement.shape))
    )
    out.provenance.setdefault(source, []).append(name)
    if placement.padded:
        out.padded.add(name)
    if part is not None:
        out.experts.add(name)
    if name != source:
        src_module = inputs.resolved.tensors[source].module
        out_module = split_tensor_name(name)[0] if src_module != source else name
        if out_module != src_module:
            out.module_renames.setdefault(src_module, set()).add(out_module)
        if renamed.redirected:
            out.redirected_modules.add(src_module)


def _ops(ops: tuple[str, ...], renamed: Renamed, how: str) -> tuple[str, ...]:
    """The placement's ops plus what the recipe's rules did to the name (``how``: written
    under its ``same`` name, ``unfused`` from a 3-D tensor, or ``renamed``)."""
    if how == "unfused":
        return ops
    if how == "same":
        return (*ops, f"keep ({renamed.steps[-1]})") if renamed.kept else ops
    rule_steps = [s for s in renamed.steps if s != "fse"]
    if renamed.kept:
        return (*ops, f"keep ({rule_steps[-1]})")
    if rule_steps:
        return (*ops, f"rename ({', '.join(rule_steps)})")
    return ops


def _check_fixed_points(inputs: PlanInputs, sources: dict[str, tuple[str, Renamed]]) -> None:
    """The loader applies the rename rules again: it must end up where ckpt meant it to."""
    for name, (source, renamed) in sources.items():
        if renamed.kept:
            continue
        again = inputs.rules.loader_view(name)
        if again != renamed.engine_name:
            raise UsageError(
                f"recipe {inputs.recipe.name}: {source!r} is written as {name!r}, which the "
                f"loader renames again to {again!r} instead of {renamed.engine_name!r}; mark "
                "the rule that is not idempotent `at_load: true` in the recipe"
            )

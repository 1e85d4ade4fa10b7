"""The planner's kinds of output, each a pure function of one source tensor and plain numbers.

- ``keep``: the tensor as it is;
- ``pad``: an expert tensor cut along its intermediate dim and padded to the target width;
- ``redirect``: a shared-expert tensor as the chunks that become routed slots (FSE);
- ``unfuse``: a 3-D fused expert tensor as one tensor per expert and projection.

``rule_for`` is the rule that says which of them places a tensor, from its expert part
alone. (Renames are the recipe's ``RuleSet.rename``; files are ``plan.sharding`` and the
layouts.) None of them sees the catalog or the policy: a test calls them with a
``TensorEntry`` or two, a storage codec and the widths. ``plan.outputs`` applies them once
per distinct form.

Example (MXFP4 down weight U8 [7168, 80] = logical [7168, 160], padded 160 -> 192)::

    p = pad(entry, "weight", codec, (7168, 160), part, [(0, 160)], target=192, width=160)
    p.pieces[0].pads, p.ops   # (Pad(dim=1, amount=16, fill='00'),), ('pad intermediate 160 -> 192 (+32, zero weights)',)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from checkpoint_tool.catalog.catalog import TensorEntry
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.experts import ExpertPart
from checkpoint_tool.plan.fse import Chunk, chunks
from checkpoint_tool.plan.model import COPY_OPS
from checkpoint_tool.plan.pieces import Placement, place, whole
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.regions import Piece, Region

#: ``pad``'s cache: placements by shape signature (experts of a layer share shapes)
PlacementCache = dict[tuple[object, ...], Placement]

#: the kinds, as ``rule_for`` numbers them: ``KEEP`` and ``PAD`` give one output per source,
#: ``REDIRECT`` and ``UNFUSE`` several
KEEP, PAD, REDIRECT, UNFUSE = range(4)


def rule_for(part: ExpertPart | None, *, fse: bool, pads: bool) -> int:
    """The kind that places a tensor of expert ``part`` (None: not an expert tensor): a 3-D
    fused expert tensor written per expert is unfused; a shared expert's tensor in a layer
    whose shared expert becomes routed slots (``fse``) is redirected; any other expert tensor
    is padded where the plan pads (``pads``), else kept, as every other tensor is.
    Example: ``rule_for(None, fse=True, pads=True)`` -> ``KEEP``."""
    if part is None:
        return KEEP
    if part.unfused:
        return UNFUSE
    if part.kind == "shared" and fse:
        return REDIRECT
    return PAD if pads else KEEP


def keep(entry: TensorEntry) -> Placement:
    """The source tensor as it is (the common case: ~90k times for R1)."""
    return whole(entry, COPY_OPS)


def check_intermediate(entry: TensorEntry, part: ExpertPart, size: int, expected: int) -> None:
    """The intermediate dim of ``entry`` (an expert weight, ``size`` on ``part.dim``) is what
    config.json says (``expected``), or the plan stops naming both."""
    if size != expected:
        raise InputError(
            f"{entry.file}: tensor {entry.name!r} has intermediate size {size} on dim "
            f"{part.dim}, config.json says {expected}; the config and the checkpoint disagree"
        )


def pad(
    entry: TensorEntry,
    role: str,
    codec: StorageFormat,
    logical: tuple[int, ...],
    part: ExpertPart,
    ranges: list[tuple[int, int]],
    *,
    target: int,
    width: int,
    cache: PlacementCache | None = None,
) -> Placement:
    """Cut ``ranges`` of the intermediate dim out of ``entry`` and pad each to ``target``.

    ``logical``: the logical shape of the module's weight (``codec.logical_shape`` of its
    storage); ``width``: the intermediate size of one segment of the source tensor (its dim
    holds ``part.segments`` of them). ``cache`` shares the regions between same-shaped experts.
    """
    cut = ranges[0][1] - ranges[0][0]
    whole_ranges = [(k * width, (k + 1) * width) for k in range(part.segments)]
    if ranges == whole_ranges and target == cut:
        return keep(entry)  # nothing to cut or pad (also skips the codec entirely)
    key = (role, entry.dtype, entry.shape, logical, codec, part.dim, part.proj == "down",
           tuple(ranges), target)  # fmt: skip
    template = cache.get(key) if cache is not None else None
    if template is not None:  # the same cut of another expert: its regions, this name
        return Placement(
            tuple(Piece.of(entry.name, p.slices, p.pads) for p in template.pieces),
            template.combine,
            template.axis,
            template.shape,
            template.padded,
            template.ops,
        )
    placement = place(
        entry,
        role,
        codec,
        logical,
        part.dim,
        ranges,
        target,
        on_intermediate_bias=part.proj != "down",
    )
    if placement.padded:
        what = "zero weights" if role == "weight" else "neutral scales"
        op = f"pad intermediate {cut} -> {target} (+{target - cut}, {what})"
    elif placement.pieces[0].slices or len(placement.pieces) > 1:
        op = f"slice intermediate {ranges}"
    else:
        op = "copy"
    placement.ops = (*placement.ops, op)
    if cache is not None:
        cache[key] = placement
    return placement


def redirect(
    entry: TensorEntry,
    suffix: str,
    part: ExpertPart,
    place_chunk: Callable[[list[tuple[int, int]]], Placement],
) -> list[tuple[Chunk, Placement]]:
    """The routed-slot chunks of a shared-expert tensor (``plan.fse.chunks``), each placed by
    ``place_chunk(ranges)`` (a ``pad`` bound to the tensor's codec and widths) and labelled."""
    layer = part.layer
    out = []
    for chunk in chunks(entry.name, suffix, part, len(entry.shape)):
        placement = place_chunk(chunk.ranges)
        op = f"fse_redirect layer {layer.layer}: shared"
        op += f" chunk {chunk.j}/{chunk.n}" if chunk.n > 1 else ""
        out.append(
            (chunk, replace(placement, ops=(f"{op} -> routed slot {chunk.slot}", *placement.ops)))
        )
    return out


def unfuse(
    entry: TensorEntry,
    role: str,
    codec: StorageFormat,
    part: ExpertPart,
    *,
    target: int,
) -> list[tuple[str, Placement]]:
    """A 3-D fused expert parameter (``experts.gate_up_proj`` [E, 2I, H] / ``experts.down_proj``
    [E, H, I], as Quark leaves them) -> ``(per-expert name, placement)`` for every expert and
    projection (``experts.{e}.gate_proj.weight`` ...), padded like every routed expert: the
    layout vLLM's DeepSeek loader reads."""
    from checkpoint_tool.catalog.safetensors_format import storage_shape

    layer = part.layer
    storage = storage_shape(entry.dtype, entry.shape, name=entry.name)
    if len(storage) != 3 or storage[0] != layer.n_routed:
        raise InputError(
            f"{entry.file}: fused expert tensor {entry.name!r} has shape {list(entry.shape)}, "
            f"expected [{layer.n_routed}, ...] (one row per routed expert); the checkpoint and "
            "config.json disagree"
        )
    logical = tuple(codec.logical_shape(storage))
    width = layer.moe_intermediate_size
    check_intermediate(entry, part, logical[part.dim % 3], width * part.segments)
    projs = [("gate", 0), ("up", 1)] if part.proj == "gate_up" else [("down", 0)]
    out: list[tuple[str, Placement]] = []
    for proj, k in projs:
        template = place(
            entry, role, codec, logical, part.dim, [(k * width, (k + 1) * width)], target
        )
        ops: tuple[str, ...] = ()
        if template.padded:
            ops = (f"pad intermediate {width} -> {target} (+{target - width}, zero weights)",)
        for e in range(layer.n_routed):
            first = Region(dim=0, start=e, stop=e + 1)
            placement = Placement(
                pieces=tuple(
                    Piece(entry.name, (first, *p.slices), p.pads) for p in template.pieces
                ),
                combine=template.combine,
                axis=template.axis,
                shape=list(template.shape[1:]),
                padded=template.padded,
                ops=(f"unfuse expert {e} {proj} from the 3-D tensor", *ops),
            )
            per_expert = f"{layer.routed_prefix}.{e}.{layer.proj_name(proj)}.weight"  # type: ignore[arg-type]
            out.append((per_expert, placement))
    return out

"""Expand a family's parameter list into storage ``TensorSpec``s, given each linear's encoding.

``assign(linear) -> encoding key`` is the preset's decision. This module only applies it:
checks alignment (packed FP4 needs the input dim to be a multiple of its group), forms NVFP4
gate/up groups (one shared ``weight_scale_2``), and gives activation scales the keys that make
them equal where producers write equal ones (gate/up of one MLP; one projection kind across a
layer's routed experts).

Example::

    specs = expand(items, lambda lin: "quark_mxfp4" if lin.role == "routed" else "bf16")
    specs[0]   # TensorSpec("model.embed_tokens.weight", "BF16", (512, 256), RandomPlain("normal"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.errors import UsageError
from checkpoint_tool.synth.encodings import ENCODINGS, Encoding
from checkpoint_tool.synth.layout import Item, Linear, Plain, QuantPart, RandomPlain, TensorSpec

Assign = Callable[[Linear], str]


def expand(items: Iterable[Item], assign: Assign) -> list[TensorSpec]:
    """Storage tensors of every item, in item order (a linear's parts stay adjacent)."""
    items = list(items)
    chosen = {it.module: ENCODINGS[assign(it)] for it in items if isinstance(it, Linear)}
    groups = _nvfp4_groups(items, chosen)
    batches = _expert_batches(items, chosen, groups)
    out: list[TensorSpec] = []
    for it in items:
        if isinstance(it, Plain):
            src = RandomPlain(it.init, it.high)
            out.append(
                TensorSpec(it.name, it.dtype, it.shape, src, tensor_nbytes(it.dtype, it.shape))
            )
            continue
        enc = chosen[it.module]
        _check_alignment(it, enc)
        members = groups.get(it.module, (it,))
        group = tuple(m.module for m in members)
        rows = tuple(m.out for m in members)
        member, key = group.index(it.module), _input_scale_key(it)
        batch, index = batches.get(group, ((group,), 0))
        for name, dtype, shape, role in enc.tensors(it.module, it.out, it.inp):
            src = QuantPart(group, member, role, enc.key, rows, it.inp, key, batch, index)
            out.append(TensorSpec(name, dtype, shape, src, tensor_nbytes(dtype, shape)))
    return out


def _check_alignment(lin: Linear, enc: Encoding) -> None:
    if lin.inp % enc.in_multiple:
        raise UsageError(
            f"{lin.module}: input size {lin.inp} is not a multiple of {enc.in_multiple}, "
            f"which {enc.key} needs; choose sizes (--hidden / --moe-intermediate) that are"
        )


def _nvfp4_groups(items: list[Item], chosen: dict[str, Encoding]) -> dict[str, tuple]:
    """gate_proj/up_proj pairs of one MLP that share NVFP4 global scales."""
    by_mlp: dict[str, dict[str, Linear]] = {}
    for it in items:
        if isinstance(it, Linear) and it.proj in ("gate", "up") and chosen[it.module].group_quant:
            by_mlp.setdefault(it.module.rsplit(".", 1)[0], {})[it.proj] = it
    groups: dict[str, tuple] = {}
    for pair in by_mlp.values():
        if len(pair) == 2 and chosen[pair["gate"].module] == chosen[pair["up"].module]:
            members = (pair["gate"], pair["up"])
            for m in members:
                groups[m.module] = members
    return groups


#: float elements one batched quantization may hold (16 MiB of float32)
BATCH_ELEMENTS = 1 << 22


def _expert_batches(
    items: list[Item], chosen: dict[str, Encoding], groups: dict[str, tuple]
) -> dict[tuple[str, ...], tuple[tuple[tuple[str, ...], ...], int]]:
    """Routed experts of one layer and projection kind, chunked: group -> (batch, index)."""
    units: dict[tuple, list[tuple[str, ...]]] = {}
    for it in items:
        if not (isinstance(it, Linear) and it.role == "routed" and chosen[it.module].quantized):
            continue
        members = groups.get(it.module, (it,))
        if members[0].module != it.module:
            continue  # a group is listed once, at its first member
        shape = (tuple(m.out for m in members), it.inp)
        kind = (it.layer, chosen[it.module].key, shape)
        units.setdefault(kind, []).append(tuple(m.module for m in members))
    out: dict[tuple[str, ...], tuple[tuple[tuple[str, ...], ...], int]] = {}
    for (_, _, (rows, inp)), unit_list in units.items():
        per_batch = max(1, BATCH_ELEMENTS // (sum(rows) * inp))
        for start in range(0, len(unit_list), per_batch):
            batch = tuple(unit_list[start : start + per_batch])
            for i, group in enumerate(batch):
                out[group] = (batch, i)
    return out


def _input_scale_key(lin: Linear) -> str:
    """Activation scales are shared by gate/up of an MLP and by all routed experts of a layer."""
    kind = "gate_up" if lin.proj in ("gate", "up") else (lin.proj or lin.module)
    if lin.role == "routed":
        return f"layer{lin.layer}.routed.{kind}"
    if lin.proj:
        return f"{lin.module.rsplit('.', 1)[0]}.{kind}"
    return lin.module

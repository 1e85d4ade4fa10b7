"""Which source tensors are expert projections, and how their intermediate dim is laid out.

Built from the model facts (module names of every routed and shared projection) and the
resolved catalog (each tensor's module): a tensor belongs to an expert projection when its
module is one. The intermediate dim is rows (dim -2) for gate/up and columns (dim -1) for
down; a fused ``gate_up`` weight holds two segments of rows (gate then up).

Example::

    parts = expert_modules(facts)
    parts["model.layers.3.mlp.experts.7.down_proj"]
    # ExpertPart(layer=<facts of layer 3>, kind='routed', proj='down', index=7, fused_3d=False)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from checkpoint_tool.model import PROJS, ModelFacts, MoeLayerFacts

if TYPE_CHECKING:
    from checkpoint_tool.quant.resolved import ResolvedColumns

PartProj = Literal["gate", "up", "down", "gate_up"]


class ExpertPart(NamedTuple):
    """One expert projection a tensor belongs to.

    ``index``: the routed expert (per-expert layouts) or the shared expert (indexed shared
    layout); None for 3-D fused routed experts and for a single (widened) shared MLP.
    A named tuple: a full-size model has ~45k expert projections.
    """

    layer: MoeLayerFacts
    kind: Literal["routed", "shared"]
    proj: PartProj
    index: int | None = None  # type: ignore[assignment]  # the field shadows tuple.index
    fused_3d: bool = False

    @property
    def dim(self) -> int:
        """Logical dim holding the intermediate size: columns of down, rows otherwise (the
        other way round for ``in_out`` 3-D fused experts, ``ExpertNaming.inter_axis``)."""
        return self.layer.naming.inter_axis(self.proj, three_d=self.fused_3d)

    @property
    def unfused(self) -> bool:
        """A 3-D fused tensor written as per-expert tensors (``out_in`` order: the DeepSeek
        loaders read per-expert experts); ``in_out`` ones (Llama-4) and gpt-oss's
        (``_blocks`` / ``_scales`` / ``_bias``) are written as they are, padded in place:
        vLLM's loaders read them 3-D themselves (``gpt_oss.py`` ``_load_weights_mxfp4``)."""
        naming = self.layer.naming
        return (
            self.fused_3d and naming.fused_3d_order == "out_in" and naming.fused_3d_weight is None
        )

    @property
    def own_weight(self) -> bool:
        """The tensor is its module's weight, with no suffix (a 3-D fused parameter such as
        ``experts.gate_up_proj``); gpt-oss's ``_blocks`` have ``_scales`` and ``_bias`` beside."""
        return self.fused_3d and self.layer.naming.fused_3d_weight is None

    @property
    def interleaved(self) -> bool:
        """gpt-oss's gate_up rows ``[g0, u0, g1, u1, ...]``: intermediate ``i`` is rows
        ``2i, 2i + 1``, so the dim is one segment ``2 x I`` wide and pads at its end (vLLM's
        ``gpt_oss.py`` ``_load_weights_mxfp4`` narrows rows ``2 * tp_rank_start : 2 * tp_rank_end``)."""
        return self.proj == "gate_up" and self.fused_3d and not self.own_weight

    @property
    def segments(self) -> int:
        """How many intermediate-sized blocks the dim holds (gate_up: gate rows, up rows;
        interleaved gate_up: one block of ``2 x I``)."""
        return 2 if self.proj == "gate_up" and not self.interleaved else 1

    @property
    def width_factor(self) -> int:
        """Rows per intermediate index of one segment: 2 for interleaved gate_up, else 1."""
        return 2 if self.interleaved else 1


def expert_modules(facts: ModelFacts) -> dict[str, ExpertPart]:
    """module name -> ``ExpertPart`` for every routed and shared expert projection module the
    facts name (3-D fused expert parameters are their own module: the tensor name)."""
    return dict(_expert_modules(facts))


def _expert_modules(facts: ModelFacts) -> Iterator[tuple[str, ExpertPart]]:
    """``expert_modules``' items, made one at a time."""
    for layer in facts.moe_layers:
        yield from _layer_modules(layer)


def _layer_modules(
    layer: MoeLayerFacts, *, routed_by_prefix: bool = False
) -> Iterator[tuple[str, ExpertPart]]:
    """The expert projection modules of one MoE layer; with ``routed_by_prefix`` the routed
    per-expert ones come once per leaf, as ``(leaf, part of expert 0)``."""
    naming = layer.naming
    if naming.routed_layout == "fused_3d":
        yield layer.fused_3d_param("gate"), ExpertPart(layer, "routed", "gate_up", None, True)
        yield layer.fused_3d_param("down"), ExpertPart(layer, "routed", "down", None, True)
    else:
        fused = naming.routed_layout == "per_expert_gate_up"
        base = layer.routed_prefix
        leaves: list[tuple[str, PartProj]] = []
        for proj in PROJS:
            kind: PartProj = "gate_up" if fused and proj != "down" else proj
            leaf = naming.gate_up_name if kind == "gate_up" else layer.proj_name(proj)
            leaves.append((leaf, kind))
        if routed_by_prefix:
            for leaf, kind in leaves:
                yield leaf, ExpertPart(layer, "routed", kind, 0)
        else:
            for e in range(layer.n_routed):  # = layer.routed_module(e, proj), ~45k for R1
                for leaf, kind in leaves:
                    yield f"{base}.{e}.{leaf}", ExpertPart(layer, "routed", kind, e)
    if layer.n_shared > 0:
        indexed = naming.shared_layout == "indexed"
        fused = naming.shared_layout == "single_gate_up"
        for j in range(layer.n_shared) if indexed else [None]:
            for proj in PROJS:
                kind = "gate_up" if fused and proj != "down" else proj
                yield layer.shared_module(proj, j), ExpertPart(layer, "shared", kind, j)


class ExpertColumns(NamedTuple):
    """Which tensors are expert projections, by the resolved catalog's module numbers.

    ``kind_of_module``: per module number, the number of its part's *kind* in ``kinds``
    (-1: no expert), where a kind is an ``ExpertPart`` up to its expert index: every expert
    of a layer and projection has one kind, and all that placing a routed expert's tensor
    needs of its part is the same for them. ``parts``: module number -> ``ExpertPart`` of
    the shared experts and the 3-D fused ones (placed one by one, with their index).
    """

    parts: dict[int, ExpertPart]
    kind_of_module: np.ndarray
    kinds: list[ExpertPart]

    def kind_of(self, module: np.ndarray) -> np.ndarray:
        """The kind number of each module number in ``module`` (-1: no expert)."""
        return self.kind_of_module[module]


def expert_columns(facts: ModelFacts, columns: ResolvedColumns) -> ExpertColumns:
    """The ``ExpertColumns`` of a resolved catalog's modules: one pass over the module names,
    a routed expert's module (``{routed prefix}.{e}.{leaf}``) recognised by its prefix and
    leaf, the rest (shared and 3-D fused experts: a few per layer) by name."""
    kinds: list[ExpertPart] = []
    numbers: dict[tuple, int] = {}

    def kind_number(part: ExpertPart) -> int:
        key = (id(part.layer), part.kind, part.proj, part.index is None, part.fused_3d)
        n = numbers.get(key)
        if n is None:
            n = numbers[key] = len(kinds)
            kinds.append(part)
        return n

    #: (routed prefix, leaf) -> (kind number, routed expert count)
    routed: dict[tuple[str, str], tuple[int, int]] = {}
    #: module name -> (kind number, part), for the shared and the 3-D fused experts
    named: dict[str, tuple[int, ExpertPart]] = {}
    for layer in facts.moe_layers:
        for module, part in _layer_modules(layer, routed_by_prefix=True):
            if part.kind == "routed" and not part.fused_3d:
                routed[(layer.routed_prefix, module)] = (kind_number(part), layer.n_routed)
            else:
                named[module] = (kind_number(part), part)
    kind_of_module = np.full(len(columns.module_names), -1, np.int32)
    parts: dict[int, ExpertPart] = {}
    for k, module in enumerate(columns.module_names):
        hit = named.get(module)
        if hit is not None:
            kind_of_module[k], parts[k] = hit
            continue
        head, _, leaf = module.rpartition(".")
        prefix, _, e = head.rpartition(".")
        got = routed.get((prefix, leaf))
        # ``f"{prefix}.{e}.{leaf}"`` for an int e: ASCII digits, no leading zero
        if got is not None and e.isdecimal() and e.isascii() and (e == "0" or e[0] != "0"):
            if int(e) < got[1]:
                kind_of_module[k] = got[0]
    return ExpertColumns(parts, kind_of_module, kinds)

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
        """Logical dim holding the intermediate size: columns of down, rows otherwise."""
        return -1 if self.proj == "down" else -2

    @property
    def segments(self) -> int:
        """How many intermediate-sized blocks the dim holds (gate_up: gate rows, up rows)."""
        return 2 if self.proj == "gate_up" else 1


def expert_modules(facts: ModelFacts) -> dict[str, ExpertPart]:
    """module name -> ``ExpertPart`` for every routed and shared expert projection module the
    facts name (3-D fused expert parameters are their own module: the tensor name)."""
    return dict(_expert_modules(facts))


def _expert_modules(facts: ModelFacts) -> Iterator[tuple[str, ExpertPart]]:
    """``expert_modules``' items, made one at a time."""
    for layer in facts.moe_layers:
        naming = layer.naming
        if naming.routed_layout == "fused_3d":
            yield layer.routed_weight(0, "gate"), ExpertPart(layer, "routed", "gate_up", None, True)
            yield layer.routed_weight(0, "down"), ExpertPart(layer, "routed", "down", None, True)
        else:
            fused = naming.routed_layout == "per_expert_gate_up"
            base = layer.routed_prefix
            leaves: list[tuple[str, PartProj]] = []
            for proj in PROJS:
                kind: PartProj = "gate_up" if fused and proj != "down" else proj
                leaf = naming.gate_up_name if kind == "gate_up" else layer.proj_name(proj)
                leaves.append((leaf, kind))
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
    """The ``ExpertColumns`` of a resolved catalog's modules."""
    parts: dict[int, ExpertPart] = {}
    kind_of_module = np.full(len(columns.module_names), -1, np.int32)
    numbers: dict[tuple, int] = {}
    kinds: list[ExpertPart] = []
    for module, part in _expert_modules(facts):
        k = columns.module_id(module)
        if k is None:
            continue
        if part.kind == "shared" or part.fused_3d:
            parts[k] = part
        key = (id(part.layer), part.kind, part.proj, part.index is None, part.fused_3d)
        n = numbers.get(key)
        if n is None:
            n = numbers[key] = len(kinds)
            kinds.append(part)
        kind_of_module[k] = n
    return ExpertColumns(parts, kind_of_module, kinds)

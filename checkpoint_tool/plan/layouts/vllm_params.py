"""Per-rank engine parameters from planned tensors: the builder, vocab tables, plain params,
buffers.

``ParamBuilder`` holds what every site needs (the planned index, the target spec, the key
resolver, the TP size) and the shared checks: every parameter the quant method registers is
present and nothing else, and each output's storage shape is the spec's for config.json's
sizes. Each site method takes one site of the target spec (``checkpoint_tool.targets.instance``)
and emits one ``OutputTensor`` per TP rank. Linears: ``vllm_linear``; routed experts:
``vllm_moe``.

Example (the embedding, rank 1 of 2, vocab 129280 padded to 64-row multiples)::

    params = builder.vocab(site)
    params[0].ranks[1].ops   # ['vocab rows [64640, 129280) of 129280, padded to 64640 per rank']
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from checkpoint_tool.catalog.safetensors_format import element_bytes, header_shape, storage_shape
from checkpoint_tool.errors import InputError
from checkpoint_tool.plan.layouts.narrow import narrow, pieces_shape
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.targets.instance import BufferSite, LinearSite, MoeSite, ParamSite, VocabSite
from checkpoint_tool.targets.shapes import (
    ROLE_BY_SUFFIX,
    vocab_shape,
)

if TYPE_CHECKING:
    from checkpoint_tool.plan.layouts.planned_index import PlannedIndex
    from checkpoint_tool.targets.keys import KeyResolver
    from checkpoint_tool.targets.spec import TargetSpec

_TORCH_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


@dataclass
class Param:
    """One engine parameter: its tensor on every rank and the planned tensors it came from."""

    name: str
    ranks: list[OutputTensor]
    planned: list[str] = field(default_factory=list)
    expert: bool = False
    padded: bool = False


class ParamBuilder:
    """Builds per-rank parameters of the non-expert sites of one model."""

    def __init__(self, spec: TargetSpec, keys: KeyResolver, index: PlannedIndex, tp: int) -> None:
        self.spec = spec
        self.keys = keys
        self.index = index
        self.tp = tp
        self.entries = index.ctx.catalog.tensors

    # -- helpers ----------------------------------------------------------------------------
    def missing(self, tensor: str, param: str, why: str) -> InputError:
        return InputError(
            f"{self.index.ctx.catalog.root}: tensor {tensor!r} is missing from the checkpoint; "
            f"vLLM's parameter {param!r} ({why}) needs it: restore it in the source, or use "
            "--layout hf"
        )

    def check_params(
        self,
        module: str,
        tensors: Mapping[str, OutputTensor],
        params: Sequence[str],
        key_of: Callable[[str], str],
        scheme: Scheme,
        site: LinearSite | MoeSite,
        what: str,
    ) -> None:
        """``module`` has a tensor for each parameter vLLM registers (``params``; ``key_of``
        names the vLLM key of one) and no scale vLLM would not register."""
        for p in params:
            if p not in tensors:
                raise self.missing(f"{module}.{p}", key_of(p), f"{scheme.short()}, {site.cite}")
        extra = sorted(set(tensors) & set(ROLE_BY_SUFFIX) - set(params))
        if extra:
            raise InputError(
                f"{self.index.ctx.catalog.root}: {', '.join(f'{module}.{s}' for s in extra)}: "
                f"vLLM's {what} ({scheme.short()}) has no such parameter; drop it with a "
                "recipe rule or fix the quantization config"
            )

    def logical(self, codec: StorageFormat, weight: OutputTensor) -> tuple[int, ...]:
        return tuple(codec.logical_shape(storage_shape(weight.dtype, tuple(weight.shape))))

    def tensor(
        self,
        name: str,
        like: OutputTensor,
        pieces: list[Piece],
        combine: str,
        axis: int,
        want: Sequence[int],
        ops: list[str],
        layer: int | None = None,
        shapes: list[tuple[int, ...]] | None = None,
    ) -> OutputTensor:
        """An output tensor of ``pieces``, checked against the spec's storage shape ``want``
        (``shapes``: the pieces' shapes, when known)."""
        if len(pieces) == 1 and combine != "stack":
            combine, axis = "single", 0
        got = pieces_shape(pieces, self.entries, combine, axis, shapes)
        want = list(want)
        same = got == want or (
            combine == "stack"
            and math.prod(got) == math.prod(want)
            and (got[1:] in (want[1:], _halved(want)) or math.prod(got[1:]) == 1)
        )
        if combine == "single" and not same:
            same = [n for n in got if n != 1] == [n for n in want if n != 1]
        if not same:
            raise InputError(
                f"{self.index.ctx.catalog.root}: {name} would be {like.dtype}{got} from "
                f"{sorted({p.source for p in pieces})}, but the {self.spec.target} model has "
                f"{want} for config.json's sizes; the checkpoint and its config disagree"
            )
        return OutputTensor(
            name=name,
            dtype=like.dtype,
            shape=header_shape(like.dtype, want),
            pieces=pieces,
            combine=combine,  # type: ignore[arg-type]
            axis=axis,
            ops=ops,
            layer=layer,
        )

    # -- vocab, plain params, buffers ----------------------------------------------------------
    def vocab(self, site: VocabSite) -> list[Param]:
        name = f"{site.hf}.weight"
        key = self.keys.key(site.vllm, "weight")
        if self.index.get(name) is None:
            raise self.missing(name, key, site.cite)
        tensor = self.index.take(name)
        if self.index.scheme(tensor).quantized:
            raise InputError(
                f"{self.index.ctx.catalog.root}: {name} is quantized but vLLM's {site.vllm} is "
                "not; use --layout hf"
            )
        rows, cols = vocab_shape(site, self.spec.vocab_padding, self.tp)
        have = storage_shape(tensor.dtype, tuple(tensor.shape))
        if list(have) != [site.rows, cols]:
            raise InputError(
                f"{self.index.ctx.catalog.root}: {name} has shape {list(have)}, config.json says "
                f"[{site.rows}, {cols}]; the checkpoint and its config disagree"
            )
        zero = "00" * element_bytes(tensor.dtype)
        ranks = []
        for r in range(self.tp):
            a, b = min(r * rows, site.rows), min((r + 1) * rows, site.rows)
            (piece,) = narrow(tensor, self.entries, 0, a, b)
            if b - a < rows:
                piece = piece._replace(
                    pads=(*piece.pads, Pad(dim=0, amount=rows - (b - a), fill=zero))
                )
            ops = [f"vocab rows [{a}, {b}) of {site.rows}, padded to {rows} per rank"]
            ranks.append(self.tensor(key, tensor, [piece], "single", 0, [rows, cols], ops))
        return [Param(key, ranks, [name], padded=site.rows < rows * self.tp)]

    def params(self, site: ParamSite) -> list[Param]:
        out = []
        for p, shape in site.params:
            name = f"{site.hf}.{p}"
            key = self.keys.key(site.vllm, p)
            if self.index.get(name) is None:
                raise self.missing(name, key, site.cite)
            tensor = self.index.take(name)
            ranks = [
                self.tensor(
                    key,
                    tensor,
                    list(tensor.pieces),
                    tensor.combine,
                    tensor.axis,
                    shape,
                    ["replicated"],
                    site.layer,
                )
                for _ in range(self.tp)
            ]
            out.append(Param(key, ranks, [name], padded=self.index.is_padded(name)))
        return out

    def buffer(self, site: BufferSite) -> Param:
        dtype = _TORCH_DTYPES.get(site.dtype)
        if dtype is None:
            raise InputError(f"target spec: buffer {site.name} has unsupported dtype {site.dtype}")
        fill = torch.tensor([site.value], dtype=dtype).view(torch.uint8).numpy().tobytes().hex()
        tensor = OutputTensor(
            name=site.name,
            dtype=site.dtype,
            shape=list(site.shape),
            pieces=[],
            fill=fill,
            ops=[f"engine buffer = {site.value} ({site.cite})"],
            layer=site.layer,
        )
        return Param(site.name, [copy.copy(tensor) for _ in range(self.tp)])


def _halved(want: Sequence[int]) -> list[int]:
    """Item shape of a stack of 2E pieces written as ``[E, 2a, *rest]``: ``[a, *rest]``; of E
    pieces written as ``[E, *rest]``: ``rest`` (either may match)."""
    if len(want) >= 2 and want[1] % 2 == 0:
        return [want[1] // 2, *want[2:]]
    return list(want[1:])

"""Per-rank engine parameters from planned tensors: linears, vocab tables, plain params, buffers.

Each builder takes one site of the target spec (``checkpoint_tool.targets.instance``), finds
the planned (HF-layout) tensors it is made of, checks them against the spec (every parameter
the quant method registers is present, nothing else, sizes as config.json says) and emits one
``OutputTensor`` per TP rank: the rank's storage slice of each merged shard (codec regions),
concatenated in shard order; per-tensor values become one entry per shard. Routed experts:
``vllm_moe``.

Example (column-parallel ``q_b_proj``, rank 1 of 2)::

    out = builder.linear(site)      # {"model.layers.3.self_attn.mla_attn.q_b_proj.weight": [r0, r1], ...}
    out[...][1].pieces
    # [Piece(source='model.layers.3.self_attn.q_b_proj.weight', slices=[Region(dim=0, ...)])]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from checkpoint_tool.catalog.safetensors_format import element_bytes, header_shape, storage_shape
from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.plan.layouts.narrow import narrow, pieces_shape
from checkpoint_tool.plan.model import OutputTensor, Pad, Piece, Region
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.targets.instance import BufferSite, LinearSite, ParamSite, VocabSite
from checkpoint_tool.targets.shapes import (
    ROLE_BY_SUFFIX,
    linear_logical,
    linear_shapes,
    required,
    scheme_params,
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
        site: Any,
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

    # -- linears ------------------------------------------------------------------------------
    def linear(self, site: LinearSite) -> list[Param]:
        shards = []
        for hf, out in site.shards:
            tensors = self.index.module(hf)
            if "weight" not in tensors:
                raise self.missing(f"{hf}.weight", self.keys.key(site.vllm, "weight"), site.cite)
            shards.append((hf, out, tensors))
        schemes = [self.index.scheme(t["weight"]) for _, _, t in shards]
        scheme = schemes[0]
        # vLLM deep-compares shard specs (quark.py QuarkConfig._find_matched_config)
        if any(s.producer_identity() != scheme.producer_identity() for s in schemes[1:]):
            names = ", ".join(
                f"{hf} ({s.short()})" for (hf, _, _), s in zip(shards, schemes, strict=True)
            )
            raise InputError(
                f"{self.index.ctx.catalog.root}: vLLM merges {names} into {site.vllm}, which needs "
                "one quantization scheme for all of them (vLLM refuses the model too)"
            )
        if site.quant == "never" and scheme.quantized:
            raise InputError(
                f"{self.index.ctx.catalog.root}: {site.shards[0][0]} is stored {scheme.short()} "
                f"but vLLM builds {site.vllm} without quantization ({site.cite}); dequantize it "
                "first or use --layout hf"
            )
        params = required(scheme_params(self.spec, scheme, site.vllm), scheme, "linear")
        for hf, _, tensors in shards:
            self.check_params(
                hf, tensors, params, lambda p: self.keys.key(site.vllm, p), scheme, site, site.vllm
            )
        codec = self.index.ctx.codec(scheme)
        logicals = []
        for hf, out, tensors in shards:
            logical = self.logical(codec, tensors["weight"])
            if logical[-2:] != (out, site.in_):
                raise InputError(
                    f"{self.index.ctx.catalog.root}: {hf}.weight has logical shape "
                    f"{list(logical)}, config.json implies {[out, site.in_]} for {site.vllm}; "
                    "the checkpoint and its config disagree"
                )
            logicals.append(logical)
        self._check_merge(site, codec, logicals)
        shapes = linear_shapes(site, codec, self.tp, params)
        role_shapes = codec.storage_shapes(linear_logical(site, self.tp))
        result = []
        for p in params:
            tensors_p = [self.index.take(f"{hf}.{p}") for hf, _, _ in shards]
            role = self.index.role(tensors_p[0])
            scalar = not role_shapes.get(role, ())
            name = self.keys.key(site.vllm, p)
            ranks = [
                self._linear_rank(
                    site, name, codec, role, scalar, tensors_p, logicals, shapes[p], r
                )
                for r in range(self.tp)
            ]
            result.append(
                Param(
                    name,
                    ranks,
                    [t.name for t in tensors_p],
                    padded=any(self.index.is_padded(t.name) for t in tensors_p),
                )
            )
        if site.bias:
            result.append(self._bias(site))
        return result

    def _bias(self, site: LinearSite) -> Param:
        """``bias`` of a linear: each shard's vector, the rank's rows of it (column-parallel),
        concatenated in shard order (vLLM's QKVParallelLinear / MergedColumnParallelLinear
        weight_loader on ``bias``)."""
        if site.parallel == "row":
            raise InputError(f"target spec: a row-parallel bias ({site.vllm}) is not modelled")
        name = self.keys.key(site.vllm, "bias")
        tensors = []
        for hf, out in site.shards:
            if self.index.get(f"{hf}.bias") is None:
                raise self.missing(f"{hf}.bias", name, site.cite)
            tensor = self.index.take(f"{hf}.bias")
            if self.index.scheme(tensor).quantized or list(tensor.shape) != [out]:
                raise InputError(
                    f"{self.index.ctx.catalog.root}: {hf}.bias is {tensor.dtype}{tensor.shape}; "
                    f"vLLM's {name} needs an unquantized [{out}] per shard"
                )
            tensors.append((out, tensor))
        split = site.parallel == "column"
        ranks = []
        for r in range(self.tp):
            pieces: list[Piece] = []
            for out, tensor in tensors:
                if split:
                    size = out // self.tp
                    pieces.extend(narrow(tensor, self.entries, 0, r * size, (r + 1) * size))
                else:
                    pieces.extend(tensor.pieces)
            want = [sum(out // self.tp if split else out for out, _ in tensors)]
            ops = [f"vllm {site.parallel} rank {r}/{self.tp}", "bias"]
            ranks.append(
                self.tensor(name, tensors[0][1], pieces, "concat", 0, want, ops, site.layer)
            )
        return Param(name, ranks, [t.name for _, t in tensors])

    def _check_merge(self, site: LinearSite, codec: StorageFormat, logicals: list[tuple[int, ...]]) -> None:
        """Merged shards concatenate their scales: every shard but the last must end on a
        scale block boundary (vLLM validate_fp8_block_shape requires the same)."""
        for (hf, out), logical in zip(site.shards[:-1], logicals[:-1], strict=True):
            per_rank = out // self.tp if site.parallel == "column" else out
            unit = codec.alignment(0, logical)
            if per_rank % unit:
                raise AlignmentError(
                    f"{hf}: {per_rank} rows per rank are not a multiple of {unit} "
                    f"({codec.label} scale blocks), so its scales cannot be concatenated into "
                    f"{site.vllm}; vLLM refuses this layout too"
                )

    def _linear_rank(
        self,
        site: LinearSite,
        name: str,
        codec: StorageFormat,
        role: str,
        scalar: bool,
        tensors: list[OutputTensor],
        logicals: list[tuple[int, ...]],
        want: tuple[int, ...],
        rank: int,
    ) -> OutputTensor:
        pieces: list[Piece] = []
        axis = 0
        for (_hf, _out), tensor, logical in zip(site.shards, tensors, logicals, strict=True):
            if scalar:
                if (
                    math.prod(storage_shape(tensor.dtype, tuple(tensor.shape))) != 1
                    or len(tensor.pieces) != 1
                ):
                    raise InputError(
                        f"{self.index.ctx.catalog.root}: {tensor.name} has shape {tensor.shape}; "
                        f"vLLM's {name} holds one value per shard"
                    )
                pieces.append(tensor.pieces[0])
                continue
            region = self._region(site, codec, role, logical, rank, tensor.name)
            if region is None:
                pieces.extend(tensor.pieces)
                if tensor.combine == "concat":
                    axis = tensor.axis
            else:
                pieces.extend(narrow(tensor, self.entries, region.dim, region.start, region.stop))
                axis = region.dim if len(site.shards) == 1 else 0
        if scalar:
            return self.tensor(name, tensors[0], pieces, "stack", 0, want,
                               [f"vllm {site.parallel}: one value per shard"], site.layer)  # fmt: skip
        ops = [f"vllm {site.parallel} rank {rank}/{self.tp}"]
        if len(site.shards) > 1:
            ops.append(f"merge {[hf.rsplit('.', 1)[-1] for hf, _ in site.shards]}")
        return self.tensor(name, tensors[0], pieces, "concat", axis, want, ops, site.layer)

    def _region(
        self,
        site: LinearSite,
        codec: StorageFormat,
        role: str,
        logical: tuple[int, ...],
        rank: int,
        tensor: str,
    ) -> Region | None:
        """Storage region of ``rank``'s share of one shard (None: the whole tensor)."""
        if site.parallel == "replicated" or role not in codec.roles:
            return None
        dim = len(logical) - (2 if site.parallel == "column" else 1)
        size = logical[dim] // self.tp
        regions = codec.storage_regions(logical, dim, rank * size, (rank + 1) * size, name=tensor)
        return regions.get(role)

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

"""The Plan: every output tensor described as byte-level operations on source tensors.

A plan is pure data. Inside ckpt it is compact (slotted records and named tuples: a full-size
R1 plan has ~92k output tensors); at the JSON edge (``ckpt plan --format json``, the manifest's
plan hash, ``Plan.model_validate_json``) it is exactly the document ``plan.document`` declares,
with pydantic validating what comes in (``plan.json_edge``). The executor needs nothing else to
write the output: it reads each ``Piece``'s source region, pads it, combines the pieces, and
writes the tensors of each ``OutputFile`` in order.

All coordinates are **storage** coordinates (see ``checkpoint_tool.regions``). The planner
converts logical slices to storage ones through the codecs and refuses misaligned ones, so the
executor stays a dumb, fast byte mover.

Example (TP rank 1 of 2 of an MXFP4 down projection, padded from 96 to 128 per rank)::

    OutputTensor(
        name="model.layers.3.mlp.experts.7.down_proj.weight", dtype="U8", shape=[7168, 64],
        pieces=(Piece(source="model.layers.3.mlp.experts.7.down_proj.weight",
                      slices=(Region(dim=1, start=48, stop=96),),
                      pads=(Pad(dim=1, amount=16, fill="00"),)),),
        ops=("tp_slice rank 1/2 dim 1", "pad dim 1 +16 bytes (zero weights)"))
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from checkpoint_tool.plan.summary import PlanSummary
from checkpoint_tool.regions import Pad, Piece, Region

__all__ = [
    "DroppedTensor",
    "OutputFile",
    "OutputTensor",
    "Pad",
    "Piece",
    "Plan",
    "PlanOptions",
    "Region",
]

Combine = Literal["single", "concat", "stack"]

#: the ops of a tensor written as it is (shared by every such tensor)
COPY_OPS: tuple[str, ...] = ("copy",)


@dataclass(slots=True, eq=False)
class OutputTensor:
    """One tensor to write. ``combine``: ``single`` (one piece), ``concat`` along ``axis``,
    or ``stack`` (new leading dim ``axis``, e.g. experts into a 3-D parameter). A ``stack`` on
    axis 0 writes its pieces back to back, so ``shape`` may be any shape with the same element
    count (``2E`` pieces ``[I, H]`` written as ``[E, 2I, H]``)."""

    name: str
    dtype: str
    shape: Sequence[int]
    pieces: Sequence[Piece]
    combine: Combine = "single"
    axis: int = 0
    #: what happened to it, for reports: e.g. ("rename", "fse_redirect slot 256", "pad dim 0 +32")
    ops: Sequence[str] = ()
    #: MoE layer this tensor belongs to (None for non-MoE tensors), for reports and verify
    layer: int | None = None
    #: a constant tensor (``pieces`` empty): every element is these bytes (hex, little-endian),
    #: e.g. ``"0000803f"`` F32 1.0 (engine buffers no checkpoint tensor provides)
    fill: str | None = None

    def __eq__(self, other: object) -> bool:
        """Equal as the document: sequences compare by items, list or tuple."""
        if not isinstance(other, OutputTensor):
            return NotImplemented
        return (
            self.name == other.name
            and self.dtype == other.dtype
            and list(self.shape) == list(other.shape)
            and list(self.pieces) == list(other.pieces)
            and (self.combine, self.axis, self.layer, self.fill)
            == (other.combine, other.axis, other.layer, other.fill)
            and list(self.ops) == list(other.ops)
        )

    __hash__ = None  # type: ignore[assignment]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        return _model_copy(self, update, deep)


@dataclass(slots=True, eq=True)
class OutputFile:
    """One safetensors file of the output. ``rank`` is set for per-rank (vllm-sharded) files."""

    name: str
    tensors: list[OutputTensor]
    nbytes: int = 0
    rank: int | None = None

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        return _model_copy(self, update, deep)

    def model_dump_json(self) -> str:
        """The file as compact JSON, field order as declared (what the plan hash reads)."""
        from checkpoint_tool.plan.json_edge import file_json

        return file_json(self)


class DroppedTensor(BaseModel):
    """A source tensor deliberately not written, with the rule that dropped it."""

    name: str
    rule: str
    reason: str


class PlanOptions(BaseModel):
    tp: int = 1
    layout: Literal["hf", "vllm-sharded"] = "hf"
    fse: Literal["auto", "on", "off"] = "auto"
    #: the engine target the output is for (``--target``; None: the default target, the newest
    #: stock vLLM on CUDA); ``--fse auto`` fuses what it fuses when it loads the output
    target: str | None = None
    pad_to: int | None = None
    max_shard_size: int = 5 * 1000**3
    layers: list[int] | None = None


@dataclass(eq=True)
class Plan:
    """Everything the executor does, and everything a reviewer needs to see before it runs."""

    ckpt_version: str
    source: str
    recipe: str
    options: PlanOptions
    files: list[OutputFile]
    source_revision: str | None = None
    dropped: list[DroppedTensor] = field(default_factory=list)
    #: the complete config.json to write (already edited)
    config: dict[str, Any] | None = None
    #: non-weight files copied verbatim (relative paths), e.g. tokenizer.json
    side_files: list[str] = field(default_factory=list)
    #: per MoE layer: whether the shared expert was redirected into routed slots
    fse_layers: dict[int, bool] = field(default_factory=dict)
    #: name in source -> name in output (for lossless verify and reports); one source may map to
    #: several outputs (TP slices, FSE chunks)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    #: the plan in numbers (what ``ckpt plan`` prints); None for hand-made plans
    summary: PlanSummary | None = None
    #: findings a reviewer should read before converting (one line each)
    notes: list[str] = field(default_factory=list)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        return _model_copy(self, update, deep)

    def tensor_count(self) -> int:
        return sum(len(f.tensors) for f in self.files)

    def tensors(self) -> Iterable[OutputTensor]:
        """Every output tensor, file by file."""
        for f in self.files:
            yield from f.tensors

    # -- the JSON edge (``plan.json_edge``) -------------------------------------------------

    def model_dump(self, *, mode: str = "json") -> dict[str, Any]:
        """The plan document as plain JSON data (what ``--format json`` prints)."""
        from checkpoint_tool.plan.json_edge import plan_dump

        return plan_dump(self)

    def model_dump_json(self, *, exclude: set[str] | None = None) -> str:
        """Compact JSON in declaration order, as pydantic writes the document model."""
        from checkpoint_tool.plan.json_edge import plan_compact_json

        return plan_compact_json(self, exclude=exclude or set())

    def json_text(self) -> str:
        """``--format json``: sorted keys, indent 2 (``cli.output.to_json`` of the document)."""
        return "".join(self.json_chunks())

    def json_chunks(self) -> Iterator[str]:
        """``json_text`` piece by piece (a file's tensors at a time), to write as it comes."""
        from checkpoint_tool.plan.json_edge import plan_pretty_chunks

        return plan_pretty_chunks(self)

    @classmethod
    def model_validate(cls, data: Any) -> Plan:
        """A plan from its JSON document (validated by ``plan.document.PlanDocument``)."""
        from checkpoint_tool.plan.json_edge import plan_load

        return plan_load(data)

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Plan:
        import json

        return cls.model_validate(json.loads(text))


def _model_copy(obj: Any, update: dict[str, Any] | None, deep: bool) -> Any:
    """pydantic's ``model_copy`` for the compact records: ``replace`` with ``update``."""
    out = copy.deepcopy(obj) if deep else copy.copy(obj)
    for key, value in (update or {}).items():
        setattr(out, key, value)
    return out

"""The Plan: every output tensor described as byte-level operations on source tensors.

A plan is pure data, in one form: these compact records (slotted dataclasses and named
tuples: a full-size R1 plan has ~92k output tensors), with the summary record beside it. Their
JSON (``ckpt plan --format json``, the manifest's plan hash, reading a plan back) is
``plan.serialize``: free functions, and a pydantic schema generated from these records. The
executor needs nothing else to write the output: it reads each ``Piece``'s source region, pads
it, combines the pieces, and writes the tensors of each ``OutputFile`` in order.

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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from checkpoint_tool.catalog.safetensors_format import tensor_nbytes
from checkpoint_tool.regions import Pad, Piece, Region

__all__ = [
    "COPY_OPS",
    "DroppedTensor",
    "FileSummary",
    "OutputFile",
    "OutputTensor",
    "Pad",
    "Piece",
    "Plan",
    "PlanOptions",
    "PlanSummary",
    "Region",
    "output_nbytes",
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


def output_nbytes(tensor: OutputTensor) -> int:
    """Bytes of ``tensor`` as written (its dtype and shape)."""
    return tensor_nbytes(tensor.dtype, tuple(tensor.shape))


@dataclass(slots=True, eq=True)
class OutputFile:
    """One safetensors file of the output. ``rank`` is set for per-rank (vllm-sharded) files."""

    name: str
    #: a list, or rows of the planner's output table (``plan.output_table.OutputRows``)
    tensors: Sequence[OutputTensor]
    nbytes: int = 0
    rank: int | None = None


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


class FileSummary(BaseModel):
    """One output file: name, tensor count, tensor data bytes (headers excluded)."""

    name: str
    tensors: int
    nbytes: int
    layers: list[int] = Field(default_factory=list)


class PlanSummary(BaseModel):
    """The plan in numbers (``ckpt plan`` human output; ``summary`` in the plan JSON)."""

    source_tensors: int = 0
    output_tensors: int = 0
    #: outputs written under their source name
    kept: int = 0
    #: outputs whose name a rename rule changed (FSE slots not included)
    renamed: int = 0
    #: outputs that are a shared expert (chunk) moved into a routed slot
    redirected: int = 0
    #: outputs that are one expert cut out of a 3-D fused expert tensor
    unfused: int = 0
    #: outputs with zero/neutral padding on the expert intermediate dim
    padded: int = 0
    #: source tensors deliberately not written (``Plan.dropped``), by rule
    dropped: int = 0
    dropped_by_rule: dict[str, int] = Field(default_factory=dict)
    fse_enabled_layers: list[int] = Field(default_factory=list)
    fse_disabled_layers: list[int] = Field(default_factory=list)
    moe_intermediate_size: int | None = None
    padded_intermediate_size: int | None = None
    #: per-rank alignment the padded size satisfies (``--pad-to``)
    pad_to: int | None = None
    shared_intermediate_size: int | None = None
    padded_shared_intermediate_size: int | None = None
    source_bytes: int = 0
    output_bytes: int = 0
    files: list[FileSummary] = Field(default_factory=list)
    #: estimated bytes each TP rank loads: expert tensors split over the ranks, every other
    #: tensor counted whole (an upper bound: vLLM also splits attention and dense MLPs)
    bytes_per_rank: list[int] = Field(default_factory=list)
    #: the most memory one worker needs for one output tensor (its bytes + the source bytes
    #: it reads); the executor streams, so this bounds the buffers, not the model size
    peak_memory_bytes: int = 0
    peak_memory_tensor: str | None = None


@dataclass(eq=True, kw_only=True)
class Plan:
    """Everything the executor does, and everything a reviewer needs to see before it runs.

    Fields in document order (``plan.serialize.plan_dump`` keeps it; the JSON sorts keys)."""

    ckpt_version: str
    source: str
    source_revision: str | None = None
    recipe: str
    options: PlanOptions
    files: list[OutputFile]
    dropped: list[DroppedTensor] = field(default_factory=list)
    #: the complete config.json to write (already edited)
    config: dict[str, Any] | None = None
    #: non-weight files copied verbatim (relative paths), e.g. tokenizer.json
    side_files: list[str] = field(default_factory=list)
    #: per MoE layer: whether the shared expert was redirected into routed slots
    fse_layers: dict[int, bool] = field(default_factory=dict)
    #: name in source -> name in output (for lossless verify and reports); one source may map to
    #: several outputs (TP slices, FSE chunks); sources in name order. A planned plan holds a
    #: view over its output rows (``plan.output_table.Provenance``), a plan read back a dict
    provenance: Mapping[str, list[str]] = field(default_factory=dict)
    #: the plan in numbers (what ``ckpt plan`` prints); None for hand-made plans
    summary: PlanSummary | None = None
    #: findings a reviewer should read before converting (one line each)
    notes: list[str] = field(default_factory=list)

    def tensor_count(self) -> int:
        return sum(len(f.tensors) for f in self.files)

    def tensors(self) -> Iterator[OutputTensor]:
        """Every output tensor, file by file."""
        for f in self.files:
            yield from f.tensors

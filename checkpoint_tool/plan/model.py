"""The Plan: every output tensor described as byte-level operations on source tensors.

A plan is pure data (pydantic, JSON-serializable; ``ckpt plan --format json`` prints it). The
executor needs nothing else to write the output: it reads each ``Piece``'s source tensor region,
pads it, combines the pieces, and writes the tensors of each ``OutputFile`` in order.

All coordinates are **storage** coordinates: the tensor as its safetensors header stores it
(packed FP4 ``U8 [out, in/2]`` slices in bytes along the last dim; group scales in groups). The
planner converts logical slices to storage ones through the codecs and refuses misaligned ones,
so the executor stays a dumb, fast byte mover.

Example (TP rank 1 of 2 of an MXFP4 down projection, padded from 96 to 128 per rank)::

    OutputTensor(
        name="model.layers.3.mlp.experts.7.down_proj.weight", dtype="U8", shape=[7168, 64],
        pieces=[Piece(source="model.layers.3.mlp.experts.7.down_proj.weight",
                      slices=[Region(dim=1, start=48, stop=96)],
                      pads=[Pad(dim=1, amount=16, fill="00")])],
        ops=["tp_slice rank 1/2 dim 1", "pad dim 1 +16 bytes (zero weights)"])
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from checkpoint_tool.plan.summary import PlanSummary


class Region(BaseModel):
    """Keep ``[start, stop)`` along ``dim`` of the source tensor (storage coordinates)."""

    dim: int
    start: int
    stop: int


class Pad(BaseModel):
    """Append ``amount`` elements along ``dim``, each element the bytes ``fill`` (hex, LE).

    ``fill`` examples: ``"00"`` zero FP4/FP8/U8, ``"7f"`` E8M0 scale 1.0, ``"0000803f"`` F32 1.0,
    ``"3f80"`` is *not* valid for BF16 (little-endian): BF16 1.0 is ``"803f"``.
    """

    dim: int
    amount: int
    fill: str = "00"


class Piece(BaseModel):
    """One source tensor, sliced (regions applied in order) then padded (pads in order)."""

    source: str
    slices: list[Region] = Field(default_factory=list)
    pads: list[Pad] = Field(default_factory=list)


class OutputTensor(BaseModel):
    """One tensor to write. ``combine``: ``single`` (one piece), ``concat`` along ``axis``,
    or ``stack`` (new leading dim ``axis``, e.g. experts into a 3-D parameter). A ``stack`` on
    axis 0 writes its pieces back to back, so ``shape`` may be any shape with the same element
    count (``2E`` pieces ``[I, H]`` written as ``[E, 2I, H]``)."""

    name: str
    dtype: str
    shape: list[int]
    pieces: list[Piece]
    combine: Literal["single", "concat", "stack"] = "single"
    axis: int = 0
    #: what happened to it, for reports: e.g. ["rename", "fse_redirect slot 256", "pad dim 0 +32"]
    ops: list[str] = Field(default_factory=list)
    #: MoE layer this tensor belongs to (None for non-MoE tensors), for reports and verify
    layer: int | None = None
    #: a constant tensor (``pieces`` empty): every element is these bytes (hex, little-endian),
    #: e.g. ``"0000803f"`` F32 1.0 (engine buffers no checkpoint tensor provides)
    fill: str | None = None


class OutputFile(BaseModel):
    """One safetensors file of the output. ``rank`` is set for per-rank (vllm-sharded) files."""

    name: str
    tensors: list[OutputTensor]
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


class Plan(BaseModel):
    """Everything the executor does, and everything a reviewer needs to see before it runs."""

    ckpt_version: str
    source: str
    source_revision: str | None = None
    recipe: str
    options: PlanOptions
    files: list[OutputFile]
    dropped: list[DroppedTensor] = Field(default_factory=list)
    #: the complete config.json to write (already edited)
    config: dict[str, Any] | None = None
    #: non-weight files copied verbatim (relative paths), e.g. tokenizer.json
    side_files: list[str] = Field(default_factory=list)
    #: per MoE layer: whether the shared expert was redirected into routed slots, and why
    fse_layers: dict[int, bool] = Field(default_factory=dict)
    #: name in source -> name in output (for lossless verify and reports); one source may map to
    #: several outputs (TP slices, FSE chunks)
    provenance: dict[str, list[str]] = Field(default_factory=dict)
    #: the plan in numbers (what ``ckpt plan`` prints); None for hand-made plans
    summary: PlanSummary | None = None
    #: findings a reviewer should read before converting (one line each)
    notes: list[str] = Field(default_factory=list)

    def tensor_count(self) -> int:
        return sum(len(f.tensors) for f in self.files)

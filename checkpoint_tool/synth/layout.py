"""What a synthetic checkpoint contains, before any byte is made: linears, plain tensors, specs.

A model family (``synth/families``) lists the model's parameters as ``Linear`` (a weight a
producer may quantize) and ``Plain`` (norms, embeddings, router biases, fused BF16 expert
stacks, ...). A preset then gives every ``Linear`` an ``Encoding`` (``synth/encodings``), which
expands it into storage tensors. The result is a flat list of ``TensorSpec``: name, safetensors
dtype, shape and the ``Source`` the data generator uses to make the bytes.

Example::

    Linear("model.layers.3.mlp.experts.0.down_proj", out=256, inp=128, role="routed", layer=3,
           proj="down")
    Plain("model.layers.3.mlp.gate.e_score_correction_bias", "F32", (8,), init="bias")
    TensorSpec("model.layers.3.mlp.experts.0.down_proj.weight_scale", "U8", (256, 4),
               QuantPart(group=("model.layers.3.mlp.experts.0.down_proj",), member=0,
                         role="scale", encoding="quark_mxfp4"))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

#: roles a family gives its linears; presets decide the encoding per role (and per layer)
LINEAR_ROLES = (
    "attn",  # attention projections (MLA, GQA, gated delta net, DSV4 attention)
    "dense_mlp",  # MLP of a dense (non-MoE) layer
    "routed",  # routed expert projection
    "shared",  # shared expert projection
    "router",  # MoE router (mlp.gate / ffn.gate): always BF16
    "router_aux",  # other small BF16 linears next to the router (Qwen shared_expert_gate)
    "lm_head",  # output head: always BF16
    "mtp_proj",  # MTP input projection (DeepSeek-V3 eh_proj, V4 e_proj/h_proj, Qwen mtp.fc)
    "mtp_head",  # DeepSeek-V3 MTP shared_head.head
    "engram",  # DeepSeek-V4 engram embedding table (FP8 rows, e8m0 scale per 32 columns)
)

#: init kinds of plain tensors (see ``synth.data``)
PLAIN_INITS = ("normal", "norm", "bias", "small", "index")


@dataclass(frozen=True)
class Linear:
    """A ``[out, in]`` weight a producer may quantize, named by its module (no ``.weight``)."""

    module: str
    out: int
    inp: int
    role: str
    layer: int | None = None
    proj: str | None = None  # "gate" | "up" | "down" for MLP / expert projections
    expert: int | None = None

    def __post_init__(self) -> None:
        if self.role not in LINEAR_ROLES:
            raise ValueError(f"unknown linear role {self.role!r}")


@dataclass(frozen=True)
class Plain:
    """A tensor written as-is: ``init`` says how its random values look.

    ``index`` tensors hold random integers in ``[0, high)`` (DeepSeek-V4 hash-routing
    ``tid2eid``); the others are floats (``norm`` around 1.0, ``bias``/``small`` around 0).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    init: str = "normal"
    high: int = 0

    def __post_init__(self) -> None:
        if self.init not in PLAIN_INITS:
            raise ValueError(f"unknown init {self.init!r}")


Item = Linear | Plain


class RandomPlain(NamedTuple):
    """Source of a plain tensor: random values of the given init kind."""

    init: str
    high: int = 0


class QuantPart(NamedTuple):
    """Source of one storage tensor of a quantized (or BF16) linear.

    ``group`` lists modules quantized together (NVFP4 gate/up share one ``weight_scale_2``:
    their float weights are stacked on the row dim, quantized once, and split back).
    ``batch`` lists groups of the same shape quantized in one codec call as a leading batch dim
    (a layer's routed experts, in chunks), purely for speed: each batch element is quantized
    independently, so the bytes do not depend on batching.
    """

    group: tuple[str, ...]
    member: int
    role: str  # "weight" | "scale" | "global_scale" | "input_scale"
    encoding: str
    #: per-member row counts of the group, to split the stacked result back
    rows: tuple[int, ...] = ()
    inp: int = 0
    #: key that makes activation scales equal where the producer writes equal ones
    input_scale_key: str = ""
    batch: tuple[tuple[str, ...], ...] = ()
    batch_index: int = 0


Source = RandomPlain | QuantPart


class TensorSpec(NamedTuple):
    """One tensor of the output: name, safetensors dtype, shape, how its bytes are made, size."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: Source
    nbytes: int


@dataclass
class SynthLayout:
    """Everything a preset decided: files' content, tensors in write order, index quirks.

    ``index_total_size`` is ``"tensors"`` (sum of tensor bytes, the usual HF convention) or
    ``"files"`` (sum of file sizes, headers included: what Quark's file-to-file flow writes).
    ``shard_digits_total`` is the width of the ``-of-N`` part of shard names (DeepSeek-V3/R1
    publish ``model-00001-of-000163.safetensors``: six digits).
    """

    config: dict
    tensors: list[TensorSpec]
    extra_files: dict[str, dict] = field(default_factory=dict)
    index_total_size: str = "tensors"
    shard_digits_total: int = 5
    default_shards: int | None = None
    family: str = ""

"""The schema of a target spec: what one engine release's model holds, per rank, as data.

A spec file (``checkpoint_tool/targets/<target>/<family>.yaml``) lists, for one model family,
every parameter the engine's model registers (with the checkpoint modules it comes from and
how it is split over TP ranks), the module aliases that decide the state-dict key, buffers
no checkpoint provides, and the parameters each quantization method registers. Sizes are
config expressions (``checkpoint_tool.targets.exprs``).

Example (one entry of ``vllm-0.33/deepseek_v2.yaml``)::

    ModuleSpec(vllm="model.layers.{L}.self_attn.o_proj", kind="linear", scope="layer",
               parallel="row", shards=[Shard(hf="model.layers.{L}.self_attn.o_proj",
               out="hidden_size")], in_="num_attention_heads * v_head_dim")
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Scope = Literal["global", "layer", "dense", "moe", "moe_unfused_shared"]
Parallel = Literal["replicated", "column", "row"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Shard(_Model):
    """One checkpoint module merged into a vLLM linear, with its logical output size."""

    hf: str
    out: str | int
    #: indivisible units the rows are made of (attention heads): TP must divide them
    units: str | int | None = None


class ModuleSpec(_Model):
    """One vLLM module (or a group of its parameters) and where its tensors come from."""

    vllm: str
    kind: Literal["linear", "param", "vocab", "moe"]
    scope: Scope
    #: config expression that must be true for the module to exist (e.g. ``q_lora_rank is None``)
    when: str | None = None
    cite: str = ""
    # linear
    parallel: Parallel = "replicated"
    shards: list[Shard] = Field(default_factory=list)
    in_: str | int | None = Field(default=None, alias="in")
    #: ``never``: the engine builds the layer without a quant config (e.g. a router)
    quant: Literal["config", "never"] = "config"
    #: config expression: the linear has a ``bias`` (column-parallel: split with the rows,
    #: merged in shard order), e.g. Qwen2-MoE's ``qkv_proj``
    bias: str | bool = False
    # param / vocab
    hf: str | None = None
    params: dict[str, list[str | int]] = Field(default_factory=dict)
    rows: str | int | None = None
    cols: str | int | None = None


class MoeSpec(_Model):
    """The routed experts' parameters: counts and sizes (config expressions), name templates."""

    experts: str
    fse_slots: str
    intermediate: str
    hidden: str
    w13: str
    w2: str
    cite: str = ""


class AliasSpec(_Model):
    """A module (or one parameter) also reachable under other paths (``{m}`` over ``each``)."""

    module: str | None = None
    param: str | None = None
    also: list[str]
    each: list[str] = Field(default_factory=list)
    cite: str = ""


class BufferSpec(_Model):
    """State-dict tensors no checkpoint provides, written with a constant value."""

    names: list[str]
    scope: Scope
    #: config expression: only where it holds (e.g. ``quant_family == 'modelopt'``)
    when: str | None = None
    dtype: str
    shape: list[int]
    value: float
    cite: str = ""


class SchemeParams(_Model):
    """Parameter suffixes one quantization method registers (see the spec file)."""

    linear: list[str]
    moe: list[str]
    static: list[str] = Field(default_factory=list)
    per_expert: list[str] = Field(default_factory=list)
    cite: str = ""


class FilesSpec(_Model):
    pattern: str
    index: bool = False


class LayersSpec(_Model):
    count: str
    moe: str


class TargetSpec(_Model):
    """One spec file: a model family under one engine release."""

    target: str
    engine: str
    version: str
    family: str
    architectures: list[str] = Field(default_factory=list)
    cite: dict[str, str] = Field(default_factory=dict)
    files: FilesSpec
    config_defaults: dict[str, Any] = Field(default_factory=dict)
    layers: LayersSpec
    vocab_padding: int = 64
    modules: list[ModuleSpec]
    moe: MoeSpec
    aliases: list[AliasSpec] = Field(default_factory=list)
    buffers: list[BufferSpec] = Field(default_factory=list)
    schemes: dict[str, SchemeParams]
    notes: list[str] = Field(default_factory=list)

    def moe_module(self, layer: int) -> str:
        """Engine module holding the routed experts of ``layer``."""
        for m in self.modules:
            if m.kind == "moe":
                return m.vllm.replace("{L}", str(layer))
        raise KeyError(f"{self.target}/{self.family}: the spec has no MoE module")

    def scheme_params(self, key: str) -> SchemeParams | None:
        """Parameters of scheme ``key`` (``quark/mxfp4``) or of ``unquantized``."""
        return self.schemes.get(key)

"""A target spec applied to one model's config.json: every module site, with sizes resolved.

``instantiate`` walks the spec's modules over the model's layers (dense / MoE / FSE decided per
layer) and returns plain sites: vLLM module path, checkpoint modules it comes from, logical
sizes. ``checkpoint_tool.targets.shapes`` turns a site plus a quant scheme into per-rank
parameter shapes; the ``vllm-sharded`` layout turns it into per-rank output tensors.

Example (DeepSeek-V3 config, layer 3, FSE off)::

    inst = instantiate(spec, config, fse_layers={3: False})
    inst.linears[...]
    # LinearSite(vllm='model.layers.3.self_attn.fused_qkv_a_proj', parallel='replicated',
    #            shards=(('model.layers.3.self_attn.q_a_proj', 1536),
    #                    ('model.layers.3.self_attn.kv_a_proj_with_mqa', 576)), in_=7168, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint_tool.model.config_fields import merged_config
from checkpoint_tool.targets.exprs import evaluate, evaluate_int
from checkpoint_tool.targets.spec import ModuleSpec, TargetSpec


@dataclass(frozen=True)
class LinearSite:
    """One vLLM linear layer: merged checkpoint shards (module, logical out rows), input size."""

    vllm: str
    parallel: str
    shards: tuple[tuple[str, int], ...]
    in_: int
    quant: str
    layer: int | None
    cite: str = ""
    bias: bool = False
    #: per shard: the indivisible units (heads) its rows are made of, or None
    units: tuple[int | None, ...] = ()

    @property
    def out(self) -> int:
        return sum(n for _, n in self.shards)


@dataclass(frozen=True)
class ParamSite:
    """Plain replicated parameters of one module (norm weights, router bias)."""

    vllm: str
    hf: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    layer: int | None
    cite: str = ""


@dataclass(frozen=True)
class VocabSite:
    """A vocab-parallel embedding or LM head: ``rows`` (vocab) x ``cols``."""

    vllm: str
    hf: str
    rows: int
    cols: int
    cite: str = ""


@dataclass(frozen=True)
class MoeSite:
    """The routed experts of one MoE layer: ``experts`` + ``fse_slots`` local experts."""

    vllm: str
    layer: int
    experts: int
    fse_slots: int
    intermediate: int
    hidden: int
    cite: str = ""

    @property
    def slots(self) -> int:
        return self.experts + self.fse_slots


@dataclass(frozen=True)
class BufferSite:
    """A constant state-dict tensor (an engine buffer no checkpoint provides)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    value: float
    layer: int | None
    cite: str = ""


@dataclass
class ModelInstance:
    """Every site of one model under one target spec."""

    spec: TargetSpec
    names: dict[str, Any]
    num_layers: int
    moe_layers: list[int]
    linears: list[LinearSite] = field(default_factory=list)
    params: list[ParamSite] = field(default_factory=list)
    vocabs: list[VocabSite] = field(default_factory=list)
    moes: list[MoeSite] = field(default_factory=list)
    buffers: list[BufferSite] = field(default_factory=list)


def config_names(spec: TargetSpec, config: Mapping[str, Any]) -> dict[str, Any]:
    """Names expressions may read: the spec's defaults overridden by config.json, flattened by
    ``merged_config`` (a multimodal wrapper's ``text_config`` wins over its top level, as
    vLLM's ``hf_text_config`` does); a field spelled by its transformers alias, e.g.
    ``num_local_experts``, is also there under its own name."""
    return {**spec.config_defaults, **merged_config(config)}


def _fill(template: str, layer: int | None) -> str:
    return template if layer is None else template.replace("{L}", str(layer))


def _layers(scope: str, inst: ModelInstance, fse: Mapping[int, bool]) -> list[int | None]:
    every = list(range(inst.num_layers))
    moe = set(inst.moe_layers)
    if scope == "global":
        return [None]
    if scope == "layer":
        return list(every)
    if scope == "dense":
        return [L for L in every if L not in moe]
    if scope == "moe":
        return [L for L in every if L in moe]
    return [L for L in every if L in moe and not fse.get(L, False)]  # moe_unfused_shared


def instantiate(
    spec: TargetSpec, config: Mapping[str, Any], fse_layers: Mapping[int, bool]
) -> ModelInstance:
    """Sites of the model ``config`` describes (sizes as config.json states them: give the
    padded ``moe_intermediate_size`` the output will record)."""
    names = config_names(spec, config)
    count = evaluate_int(spec.layers.count, names, "layers.count")
    moe_layers = [L for L in range(count) if evaluate(spec.layers.moe, {**names, "L": L})]
    inst = ModelInstance(spec=spec, names=names, num_layers=count, moe_layers=moe_layers)
    for mod in spec.modules:
        for layer in _layers(mod.scope, inst, fse_layers):
            scope_names = names if layer is None else {**names, "L": layer}
            if mod.when is not None and not evaluate(mod.when, scope_names):
                continue
            _add(inst, mod, layer, scope_names, fse_layers)
    for buf in spec.buffers:
        for layer in _layers(buf.scope, inst, fse_layers):
            if buf.when is not None and not evaluate(buf.when, {**names, "L": layer}):
                continue
            for name in buf.names:
                inst.buffers.append(
                    BufferSite(
                        _fill(name, layer), buf.dtype, tuple(buf.shape), buf.value, layer, buf.cite
                    )
                )
    return inst


def _add(
    inst: ModelInstance,
    mod: ModuleSpec,
    layer: int | None,
    names: Mapping[str, Any],
    fse: Mapping[int, bool],
) -> None:
    vllm = _fill(mod.vllm, layer)
    if mod.kind == "linear":
        assert mod.in_ is not None, f"{mod.vllm}: a linear needs `in`"
        shards = tuple(
            (_fill(s.hf, layer), evaluate_int(s.out, names, f"{vllm} out")) for s in mod.shards
        )
        inst.linears.append(
            LinearSite(
                vllm,
                mod.parallel,
                shards,
                evaluate_int(mod.in_, names, f"{vllm} in"),
                mod.quant,
                layer,
                mod.cite,
                bool(evaluate(mod.bias, names)) if isinstance(mod.bias, str) else mod.bias,
                tuple(
                    None if s.units is None else evaluate_int(s.units, names, f"{vllm} units")
                    for s in mod.shards
                ),
            )
        )
    elif mod.kind == "param":
        assert mod.hf is not None, f"{mod.vllm}: a param entry needs `hf`"
        params = tuple(
            (p, tuple(evaluate_int(d, names, f"{vllm}.{p}") for d in dims))
            for p, dims in mod.params.items()
        )
        inst.params.append(ParamSite(vllm, _fill(mod.hf, layer), params, layer, mod.cite))
    elif mod.kind == "vocab":
        assert mod.hf is not None and mod.rows is not None and mod.cols is not None
        inst.vocabs.append(
            VocabSite(
                vllm,
                _fill(mod.hf, layer),
                evaluate_int(mod.rows, names, f"{vllm} rows"),
                evaluate_int(mod.cols, names, f"{vllm} cols"),
                mod.cite,
            )
        )
    else:
        assert layer is not None, "MoE sites live in a layer"
        moe = inst.spec.moe
        slots = evaluate(moe.fse_slots, names) if fse.get(layer, False) else 0
        inst.moes.append(
            MoeSite(
                vllm,
                layer,
                evaluate_int(moe.experts, names, "moe.experts"),
                int(slots or 0),
                evaluate_int(moe.intermediate, names, "moe.intermediate"),
                evaluate_int(moe.hidden, names, "moe.hidden"),
                mod.cite or moe.cite,
            )
        )

"""compressed-tensors configs (``quant_method: compressed-tensors``, what llm-compressor writes).

A config lists ``config_groups``, each with ``targets`` (layer names, ``re:`` regexes, module
class names such as ``Linear``), ``weights`` / ``input_activations`` arguments and an optional
per-group ``format``; ``ignore`` lists layers left in float; ``format`` is the default
serialization (``float-quantized``, ``pack-quantized``, ``nvfp4-pack-quantized``, ...).

Example (moonshotai/Kimi-K2-Thinking)::

    {"quant_method": "compressed-tensors", "format": "pack-quantized",
     "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                    "symmetric": true, "dynamic": false}}},
     "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                "re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*"]}

vLLM's reading (``vllm/model_executor/layers/quantization/compressed_tensors/``):

- ``compressed_tensors.py`` ``CompressedTensorsConfig.get_scheme_dict``: ``ignore`` first
  (``utils.py`` ``should_ignore_layer``: exact or ``re:`` ``re.match`` on the vLLM layer name, a
  fused layer ignored only when every shard is, shards that disagree raise), then the targets in
  config order (``find_matched_target``: the layer name exact or ``re:``, then every shard of a
  fused layer, then the *class name* by case-insensitive substring). ``from_config`` drops a
  group whose only target ends with ``Attention``.
- ``compressed_tensors_moe.py`` ``CompressedTensorsMoEMethod.get_moe_method``: a FusedMoE layer
  ``X.experts`` is resolved through ``X.experts.0.{gate,up,down}_proj`` with the layer's class
  ``RoutedExperts`` (``_add_fused_moe_to_target_scheme_map`` copies ``Linear``'s entry to
  ``RoutedExperts``); the three must agree, else "All MoE projections need to have same
  quantization scheme but found multiple".

The producer (compressed-tensors ``utils/match.py`` ``is_match``) matched each HF module on its
own: the name exact or ``re.match``, or the class name *equal* (an ``nn.Linear`` is
``Linear``).

What each scheme stores (compressed-tensors ``compressors/``):

- ``float-quantized`` FP8: ``weight`` F8_E4M3, ``weight_scale`` ``[1]`` (tensor), ``[out, 1]``
  (channel) or ``[ceil(out/b0), ceil(in/b1)]`` (block), ``input_scale`` ``[1]`` when static;
- ``pack-quantized`` INT4: ``weight_packed`` I32 ``[out, in/8]`` (value ``q + 8``, element
  ``j`` of a word in bits ``4j..4j+3``), ``weight_scale`` ``[out, in/group]``,
  ``weight_shape`` I64 ``[2]``, ``weight_zero_point`` I32 ``[out/8, in/group]`` when asymmetric;
- ``nvfp4-pack-quantized``: ``weight_packed`` U8 ``[out, in/2]`` (even element in the low
  nibble), ``weight_scale`` F8_E4M3 ``[out, in/16]``, ``weight_global_scale`` F32 ``[1]``
  (a divisor: ``1 / weight_scale_2`` of ModelOpt), ``input_global_scale`` F32 ``[1]``.

Scales other than NVFP4's are written in the dtype of the weight they quantized
(``quantization/lifecycle/initialize.py`` ``initialize_qparams``: the observed dtype), i.e.
the model's ``torch_dtype``, unless ``scale_dtype`` says otherwise.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from checkpoint_tool.quant.configs.base import QuantConfigBase, unquantized
from checkpoint_tool.quant.configs.names import PACKED_MODULES, expert_parts, packed_siblings
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

SOURCE = "compressed_tensors"
#: the FusedMoE layer's class in vLLM (``fused_moe/routed_experts.py`` ``RoutedExperts``)
MOE_CLASS = "RoutedExperts"
#: vLLM's activation-quantization formats (``utils.py`` ``is_activation_quantization_format``)
ACT_FORMATS = ("naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized")
#: weight-only int bits vLLM's WNA16 methods take (``WNA16_SUPPORTED_BITS``)
WNA16_BITS = (4, 8)
_TORCH_DTYPES = {
    "float32": "F32",
    "bfloat16": "BF16",
    "float16": "F16",
    "float8_e4m3fn": "F8_E4M3",
    "uint8": "U8",
}
_FLOAT_SCALES = ("BF16", "F32", "F16")


class CtArgs(BaseModel):
    """compressed-tensors ``QuantizationArgs`` (weights or activations), strategy inferred
    from ``group_size`` as the library does when it is not written."""

    model_config = ConfigDict(extra="allow", frozen=True)

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    group_size: int | None = None
    strategy: str | None = None
    block_structure: tuple[int, int] | None = None
    dynamic: bool | str = False
    actorder: str | bool | None = None
    scale_dtype: str | None = None

    @field_validator("type", "strategy", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @field_validator("block_structure", mode="before")
    @classmethod
    def _block(cls, v: Any) -> Any:
        if isinstance(v, str):  # "128x128", an older spelling
            return tuple(int(x) for x in v.split("x"))
        return v

    @property
    def kind(self) -> str:
        """The strategy, written or inferred: ``tensor`` | ``channel`` | ``group`` | ..."""
        if self.strategy:
            return self.strategy
        if self.group_size is None:
            return "tensor"
        return "channel" if self.group_size == -1 else "group"

    @property
    def is_dynamic(self) -> bool:
        return self.dynamic is True or self.dynamic == "true"

    def label(self) -> str:
        """``int4 group/32``, ``float8 channel``, ``float8 block[128,128]``."""
        what = f"{self.type}{self.num_bits} {self.kind}"
        if self.kind in ("group", "tensor_group"):
            what += f"/{self.group_size}"
        if self.kind == "block" and self.block_structure:
            what += f"[{self.block_structure[0]},{self.block_structure[1]}]"
        return what


class CtGroup(BaseModel):
    """One ``config_groups`` entry."""

    model_config = ConfigDict(extra="allow", frozen=True)

    targets: tuple[str, ...] = ()
    weights: CtArgs | None = None
    input_activations: CtArgs | None = None
    output_activations: CtArgs | None = None
    format: str | None = None

    def key(self, default_format: str | None) -> tuple:
        """What vLLM compares between the three projections of a FusedMoE layer."""
        return (self.weights, self.input_activations, self.format or default_format)


def name_matches(name: str, target: str) -> bool:
    """vLLM's ``is_equal_or_regex_match`` without ``check_contains`` (and compressed-tensors'
    name rule): equal, or ``re:PATTERN`` with ``re.match`` (anchored at the start only)."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == name


def class_matches(class_name: str, target: str) -> bool:
    """vLLM's class-name rule (``check_contains=True``): the target, lowercased, is contained
    in the class name lowercased (``Linear`` matches ``RowParallelLinear``)."""
    return not target.startswith("re:") and target.lower() in class_name.lower()


def vllm_linear_class(module: str) -> str:
    """The vLLM linear class a checkpoint module is loaded into (all contain ``Linear``; only
    targets naming a class more narrowly than ``Linear`` tell them apart)."""
    packed = packed_siblings(module)
    if packed is not None:
        return {"qkv_proj": "QKVParallelLinear"}.get(packed[0], "MergedColumnParallelLinear")
    last = module.rpartition(".")[2]
    if last in ("down_proj", "o_proj", "w2", "wo", "out_proj"):
        return "RowParallelLinear"
    return "ColumnParallelLinear"


class CompressedTensorsConfig(QuantConfigBase):
    """The ``quantization_config`` of a compressed-tensors export (see the module docstring).

    ``scheme_for`` answers as vLLM resolves the module, ``producer_scheme_for`` as
    compressed-tensors matched it when writing the files.
    """

    source: ClassVar[str] = SOURCE

    quant_method: str = "compressed-tensors"
    format: str | None = None
    config_groups: dict[str, CtGroup] = Field(default_factory=dict)
    ignore: tuple[str, ...] = ()
    kv_cache_scheme: Any = None
    quantization_status: str | None = None
    #: the model's ``torch_dtype``: compressed-tensors writes int/FP8 scales in it
    model_dtype: str | None = None

    @field_validator("ignore", mode="before")
    @classmethod
    def _ignore(cls, v: Any) -> Any:
        return () if v is None else v

    @classmethod
    def from_config(cls, qc: dict[str, Any], config: dict[str, Any]) -> CompressedTensorsConfig:
        """From config.json's ``quantization_config`` (``config`` gives the model dtype)."""
        dtype = config.get("torch_dtype") or config.get("dtype")
        text = config.get("text_config")
        if dtype is None and isinstance(text, dict):
            dtype = text.get("torch_dtype") or text.get("dtype")
        return cls.model_validate({**qc, "model_dtype": _TORCH_DTYPES.get(str(dtype))})

    # -- vLLM's view --------------------------------------------------------------------------

    def vllm_groups(self) -> list[tuple[str, CtGroup]]:
        """(target, group) in vLLM's map order: groups whose only target ends with
        ``Attention`` dropped (``from_config``), later duplicates overriding earlier ones in
        place, and ``RoutedExperts`` given ``Linear``'s entry at the end."""
        out: dict[str, CtGroup] = {}
        for group in self.config_groups.values():
            if len(group.targets) == 1 and group.targets[0].endswith("Attention"):
                continue
            for target in group.targets:
                out[target] = group
        if "Linear" in out and MOE_CLASS not in out:
            out[MOE_CLASS] = out["Linear"]
        return list(out.items())

    def vllm_ignored(self, layer: str) -> bool | None:
        """``should_ignore_layer`` on a vLLM layer name: True / False, None when the shards
        of a fused layer disagree (vLLM raises)."""
        if any(name_matches(layer, e) for e in self.ignore):
            return True
        parent, _, last = layer.rpartition(".")
        shards = _fused_shards(parent, last)
        if not shards:
            return False
        hits = [any(name_matches(s, e) for e in self.ignore) for s in shards]
        if any(hits) and not all(hits):
            return None
        return all(hits)

    def vllm_match(self, layer: str, class_name: str) -> tuple[str, CtGroup] | None:
        """``find_matched_target``: the name, then every shard of a fused layer, then the
        class name (substring)."""
        groups = self.vllm_groups()
        for target, group in groups:
            if name_matches(layer, target):
                return target, group
        parent, _, last = layer.rpartition(".")
        shards = _fused_shards(parent, last)
        if shards:
            firsts = [next((tg for tg in groups if name_matches(s, tg[0])), None) for s in shards]
            if all(firsts):
                return firsts[0]
        for target, group in groups:
            if class_matches(class_name, target):
                return target, group
        return None

    def _vllm_linear(self, layer: str, class_name: str) -> tuple[str, CtGroup | None, str]:
        """(rule, group or None, error) for one vLLM layer name."""
        ignored = self.vllm_ignored(layer)
        if ignored is None:
            return (
                "",
                None,
                (
                    f"Found different quantization schemes for the shards of {layer}. vLLM requires "
                    "all to use the same scheme."
                ),
            )
        if ignored:
            return f"ignore matches {layer!r}", None, ""
        hit = self.vllm_match(layer, class_name)
        if hit is None:
            return f"no config_groups target matches {layer!r}", None, ""
        return f"target {hit[0]!r} matches {layer!r}", hit[1], ""

    def scheme_for(self, module: str) -> Scheme:
        moe = expert_parts(module)
        if moe is not None:
            return self._moe_scheme(moe[0], moe[2])
        packed = packed_siblings(module)
        layer = f"{module.rpartition('.')[0]}.{packed[0]}" if packed else module
        rule, group, error = self._vllm_linear(layer, vllm_linear_class(module))
        if error:
            return _refused(f"vllm raises: {error}")
        return self._scheme(group, f"vllm: {rule}")

    def _moe_scheme(self, layer: str, proj: str) -> Scheme:
        projs = ("w1", "w3", "w2") if proj in ("w1", "w2", "w3") else MOE_PROJS
        found = [self._vllm_linear(f"{layer}.0.{p}", MOE_CLASS) for p in projs]
        errors = [e for _, _, e in found if e]
        if errors:
            return _refused(f"vllm raises: {errors[0]}")
        keys = {None if g is None else g.key(self.format) for _, g, _ in found}
        if len(keys) > 1:
            return _refused(
                "vllm raises: All MoE projections need to have same quantization scheme but "
                f"found multiple (FusedMoE layer {layer!r})"
            )
        rule, group, _ = found[-1]
        return self._scheme(group, f"vllm: {rule} (FusedMoE layer {layer!r})")

    # -- the producer's view ------------------------------------------------------------------

    def producer_scheme_for(self, module: str) -> Scheme:
        cls = "Linear"  # every quantizable HF module here is an nn.Linear
        for entry in self.ignore:
            if name_matches(module, entry) or entry == cls:
                return unquantized(SOURCE, f"compressed-tensors: ignore {entry!r}")
        for name, group in self.config_groups.items():
            for target in group.targets:
                if name_matches(module, target) or target == cls:
                    rule = f"compressed-tensors: {name} target {target!r}"
                    return self._scheme(group, rule)
        return unquantized(SOURCE, "compressed-tensors: no config_groups target matches")

    # -- schemes --------------------------------------------------------------------------------

    def _scheme(self, group: CtGroup | None, rule: str) -> Scheme:
        if group is None or group.weights is None:
            return unquantized(SOURCE, rule)
        fmt = group.format or self.format or ""
        return ct_scheme(group, fmt, rule, self.model_dtype)

    def summary(self) -> str:
        groups = ", ".join(
            f"{g.weights.label() if g.weights else 'float'} ({g.format or self.format})"
            for g in self.config_groups.values()
        )
        return f"compressed-tensors {groups}; {len(self.ignore)} ignore entries"


#: a FusedMoE layer's checkpoint projections (``ckpt_{gate,up,down}_proj_name``)
MOE_PROJS = ("gate_proj", "up_proj", "down_proj")


def _fused_shards(parent: str, last: str) -> list[str]:
    """The checkpoint shards of a fused vLLM layer ``parent.last`` (none when not fused)."""
    return [f"{parent}.{s}" for s in PACKED_MODULES.get(last, ())]


def _refused(rule: str) -> Scheme:
    return Scheme(format=WeightFormat.UNSUPPORTED, source=SOURCE, rule=rule)


def _scale_dtypes(args: CtArgs, model_dtype: str | None) -> tuple[str, ...]:
    first = _TORCH_DTYPES.get((args.scale_dtype or "").removeprefix("torch."), model_dtype)
    rest = tuple(d for d in _FLOAT_SCALES if d != first)
    return (first, *rest) if first in _FLOAT_SCALES else _FLOAT_SCALES


def ct_scheme(group: CtGroup, fmt: str, rule: str, model_dtype: str | None = None) -> Scheme:
    """The ``Scheme`` of a config group serialized as ``fmt``, in vLLM's order of checks
    (``_get_scheme_from_parts``, ``get_moe_method``); what ckpt cannot decode is
    ``unsupported`` with the reason."""
    w, a = group.weights, group.input_activations
    assert w is not None
    spec = group.model_dump(mode="json", exclude_none=True)
    spec["format"] = fmt
    rule = f"{rule}: {w.label()} {fmt}"
    if w.type == "float" and w.num_bits == 4 and w.kind == "tensor_group" and w.group_size == 16:
        return Scheme(
            format=WeightFormat.NVFP4,
            weight_dtypes=("U8",),
            group_size=16,
            weight_suffix="weight_packed",
            scale_suffix="weight_scale",
            scale_dtypes=("F8_E4M3",),
            global_scale_suffix="weight_global_scale",
            global_scale_divides=True,
            input_scale_suffix="input_global_scale" if a is not None else None,
            input_scale_dtypes=("F32",) if a is not None else (),
            activation="static" if a is not None else None,
            source=SOURCE,
            rule=rule,
            spec=spec,
        )
    if w.type == "int" and a is None and not w.is_dynamic and w.kind in ("group", "channel"):
        if fmt != "pack-quantized" or w.num_bits not in WNA16_BITS:
            return _unsupported(spec, f"{rule}; vLLM's WNA16 needs pack-quantized 4 or 8 bits")
        if w.num_bits != 4 or w.kind != "group" or not w.group_size:
            return _unsupported(spec, f"{rule}; ckpt decodes int4 group only")
        return Scheme(
            format=WeightFormat.INT4,
            weight_dtypes=("I32",),
            group_size=int(w.group_size),
            weight_suffix="weight_packed",
            scale_suffix="weight_scale",
            scale_dtypes=_scale_dtypes(w, model_dtype),
            zero_point_suffix=None if w.symmetric else "weight_zero_point",
            activation=None,
            source=SOURCE,
            rule=rule,
            spec=spec,
        )
    if w.type == "float" and w.num_bits == 8 and w.symmetric and not w.is_dynamic:
        if fmt not in ACT_FORMATS:
            return _unsupported(spec, f"{rule}; vLLM reads FP8 weights only from {ACT_FORMATS}")
        static = a is not None and not a.is_dynamic
        common: dict[str, Any] = {
            "weight_dtypes": ("F8_E4M3",),
            "scale_suffix": "weight_scale",
            "scale_dtypes": _scale_dtypes(w, model_dtype),
            "input_scale_suffix": "input_scale" if static else None,
            "input_scale_dtypes": _scale_dtypes(a, model_dtype) if static and a else (),
            "activation": None if a is None else ("static" if static else "dynamic"),
            "source": SOURCE,
            "rule": rule,
            "spec": spec,
        }
        if w.kind == "tensor":
            return Scheme(format=WeightFormat.FP8_PER_TENSOR, **common)
        if w.kind == "channel":
            return Scheme(format=WeightFormat.FP8_PER_CHANNEL, **common)
        if w.kind == "block" and w.block_structure:
            block = (int(w.block_structure[0]), int(w.block_structure[1]))
            return Scheme(format=WeightFormat.FP8_BLOCK, block=block, **common)
    return _unsupported(spec, f"{rule}; ckpt has no codec for it")


def _unsupported(spec: dict[str, Any], rule: str) -> Scheme:
    return Scheme(
        format=WeightFormat.UNSUPPORTED,
        weight_dtypes=("I32", "U8", "I8", "F8_E4M3"),
        weight_suffix="weight_packed" if "pack" in str(spec.get("format")) else "weight",
        scale_suffix="weight_scale",
        source=SOURCE,
        rule=rule,
        spec=spec,
    )

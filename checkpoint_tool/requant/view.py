"""The source as it will be once the chosen shared experts are MXFP4: a catalog view.

``requant_view`` returns a copy of the catalog whose selected shared-expert modules carry the
tensors Quark writes for MXFP4 (``weight`` U8 ``[N, K/2]``, ``weight_scale`` U8 ``[N, K/32]``)
instead of their source tensors (BF16 ``weight``; FP8 ``weight`` + ``weight_scale(_inv)``,
``input_scale``), and whose ``quantization_config`` says so the way vLLM's Quark loader and FSE
gate read it: the modules leave ``exclude`` (a pattern that covered them is replaced by the
exact names of the other modules it covered) and resolve to the routed experts' MXFP4 spec:
the global one (an exact ``layer_quant_config`` entry they had, e.g. FP8, is removed), else an
exact entry equal to it, written first (vLLM takes the first key that matches). The policy and the planner run on that view unchanged, so a fusing
``--target`` gives those layers their routed slots. ``requant.plan`` then marks the planned
pieces of those tensors ``requant="mxfp4"``.

Example::

    view = requant_view(catalog, facts, [1, 2])
    view.modules["model.layers.1.mlp.shared_experts.down_proj"].source_format   # 'bf16'
    view.catalog.tensors["model.layers.1.mlp.shared_experts.down_proj.weight"].dtype   # 'U8'
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from checkpoint_tool.catalog.catalog import Catalog
from checkpoint_tool.catalog.safetensors_format import TensorEntry
from checkpoint_tool.errors import UsageError
from checkpoint_tool.formats import format_of
from checkpoint_tool.model import ModelFacts
from checkpoint_tool.policy.vllm_names import matching_patterns, quark_layer_config
from checkpoint_tool.quant.requant.scheme import GROUP, MXFP4_SCHEME
from checkpoint_tool.quant.resolve import ResolvedCatalog, resolve_catalog, split_tensor_name
from checkpoint_tool.quant.roles import SCALE_ROLES, role_of_suffix
from checkpoint_tool.quant.scheme import Scheme

#: the MXFP4 layer spec AMD Quark 0.13 writes (``MXFP4Scheme``: weight static, inputs dynamic),
#: used when the routed experts are not MXFP4 themselves
QUARK_MXFP4_TENSOR: dict[str, Any] = {
    "block_size": None,
    "ch_axis": -1,
    "dtype": "fp4",
    "enable_buffer_reuse": False,
    "group_size": 32,
    "is_dynamic": False,
    "is_scale_quant": False,
    "max_input_numel": 4194304,
    "mx_element_dtype": None,
    "observer_cls": "PerBlockMXObserver",
    "qscheme": "per_group",
    "round_method": "half_even",
    "scale_calculation_mode": "even",
    "scale_format": "e8m0",
    "scale_type": "float",
    "symmetric": None,
    "zero_point_type": "int32",
}
QUARK_MXFP4_SPEC: dict[str, Any] = {
    "bias": None,
    "input_tensors": {**QUARK_MXFP4_TENSOR, "is_dynamic": True},
    "output_tensors": None,
    "target_device": None,
    "weight": QUARK_MXFP4_TENSOR,
}


@dataclass(frozen=True)
class RequantModule:
    """One shared projection to requantize: its source tensors and what they hold."""

    module: str
    layer: int
    weight: str
    #: the source weight's scale tensor (None for float weights)
    scale: str | None
    #: source tensors not written (the scale, activation scales)
    replaced: tuple[str, ...]
    #: e.g. ``"bf16"``, ``"fp8_block"``, ``"mxfp8"`` (the scheme's format)
    source_format: str
    #: logical ``[out, in]``
    shape: tuple[int, int]


@dataclass
class RequantView:
    catalog: Catalog
    modules: dict[str, RequantModule]
    #: layers with at least one requantized module
    layers: list[int]
    notes: list[str] = field(default_factory=list)
    #: virtual tensor name -> its module (``M.weight``, ``M.weight_scale``)
    virtual: dict[str, str] = field(default_factory=dict)
    #: the layers asked for (``layers`` plus those already MXFP4)
    requested: list[int] = field(default_factory=list)


def requant_view(catalog: Catalog, facts: ModelFacts, layers: list[int]) -> RequantView:
    """The view of ``catalog`` with the shared experts of ``layers`` as MXFP4 (module doc)."""
    where = catalog.source or str(catalog.root)
    qc = (catalog.config or {}).get("quantization_config")
    if not isinstance(qc, dict) or qc.get("quant_method") != "quark":
        method = qc.get("quant_method") if isinstance(qc, dict) else None
        raise UsageError(
            f"{where}: config.json's quantization_config is {method or 'absent'}; "
            "requantized shared experts are described as Quark MXFP4 layers, so the source "
            "must be a Quark export (quant_method: quark)"
        )
    resolved = resolve_catalog(catalog, semantics="producer")
    by_layer = {lf.layer: lf for lf in facts.moe_layers}
    modules: dict[str, RequantModule] = {}
    notes: list[str] = []
    done: list[int] = []
    for n in layers:
        lf = by_layer[n]
        todo = []
        for module in lf.shared_modules():
            weight = resolved.modules.get(module, {}).get("weight")
            if weight is None:
                raise UsageError(
                    f"{where}: layer {n}: shared expert module {module!r} has no weight tensor "
                    f"({module}.weight); the checkpoint is incomplete, nothing to requantize"
                )
            scheme = resolved.tensors[weight].scheme
            if scheme.format is MXFP4_SCHEME.format:  # already what requantization writes
                continue
            if not format_of(scheme).requantizable:  # the formats read back as a source
                raise UsageError(
                    f"{where}: layer {n}: {weight!r} is {scheme.short()}; requantization reads "
                    "BF16/F16/F32, block/channel/tensor FP8 or MXFP8 weights"
                )
            todo.append((module, weight, scheme))
        if not todo:
            notes.append(f"requantize: layer {n}: shared expert is already MXFP4; left as it is")
            continue
        done.append(n)
        for module, weight, scheme in todo:
            modules[module] = _module(catalog, resolved, n, module, weight, scheme, where)
    tensors, virtual = _tensors(catalog, modules)
    config = copy.deepcopy(catalog.config) or {}
    if modules:
        _edit_quark(config["quantization_config"], facts, done, modules, resolved)
    view = replace(catalog, tensors=tensors, config=config)
    return RequantView(view, modules, done, notes, virtual, list(layers))


def _module(
    catalog: Catalog,
    resolved: ResolvedCatalog,
    layer: int,
    module: str,
    weight: str,
    scheme: Scheme,
    where: str,
) -> RequantModule:
    entry = catalog.tensors[weight]
    if len(entry.shape) != 2 or entry.shape[1] % GROUP:
        raise UsageError(
            f"{where}: {weight!r} has shape {list(entry.shape)}; MXFP4 needs a 2-D weight whose "
            f"input dim is a multiple of {GROUP}"
        )
    siblings = resolved.modules.get(module, {})
    replaced = tuple(
        name for suffix, name in siblings.items() if role_of_suffix(suffix) in SCALE_ROLES
    )
    scale = None
    if scheme.quantized:
        scale = siblings.get(scheme.scale_suffix or "") or next(
            (siblings[s] for s in ("weight_scale_inv", "weight_scale") if s in siblings), None
        )
        if scale is None:
            raise UsageError(
                f"{where}: {weight!r} is {scheme.short()} but its scale tensor is missing; the "
                "checkpoint is incomplete"
            )
    shape = (int(entry.shape[0]), int(entry.shape[1]))
    return RequantModule(module, layer, weight, scale, replaced, scheme.format.value, shape)


def _tensors(
    catalog: Catalog, modules: dict[str, RequantModule]
) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """The view's tensors: each module's source tensors replaced by Quark's MXFP4 pair."""
    gone = {name for m in modules.values() for name in (*m.replaced, m.weight)}
    out: dict[str, TensorEntry] = {}
    virtual: dict[str, str] = {}
    for name, e in catalog.tensors.items():
        if name not in gone:
            out[name] = e
            continue
        module = split_tensor_name(name)[0]
        m = modules[module]
        if name != m.weight:
            continue
        n, k = m.shape
        for suffix, cols in (("weight", k // 2), ("weight_scale", k // GROUP)):
            vname = f"{module}.{suffix}"
            out[vname] = TensorEntry(vname, e.file, "U8", (n, cols), e.begin, e.begin + n * cols)
            virtual[vname] = module
    return out, virtual


def _edit_quark(
    qc: dict[str, Any],
    facts: ModelFacts,
    layers: list[int],
    modules: dict[str, RequantModule],
    resolved: ResolvedCatalog,
) -> None:
    """``exclude`` without the requantized modules; their ``layer_quant_config`` entries."""
    chosen = set(modules)
    everyone = sorted(resolved.modules)
    exclude = [e for e in qc.get("exclude") or [] if isinstance(e, str)]
    new_exclude: list[str] = []
    for entry in exclude:
        hits = [m for m in everyone if any(matching_patterns(m, [entry]))]
        if not any(m in chosen for m in hits):
            new_exclude.append(entry)
        elif entry.startswith("re:") or "*" in entry:  # keep what else it excluded
            new_exclude += [m for m in hits if m not in chosen and m not in new_exclude]
    if "exclude" in qc or new_exclude:
        qc["exclude"] = new_exclude
    lqc = qc.get("layer_quant_config")
    lqc = dict(lqc) if isinstance(lqc, dict) else {}
    glob = qc.get("global_quant_config")
    by_layer = {lf.layer: lf for lf in facts.moe_layers}
    first: dict[str, Any] = {}
    for n in layers:
        routed = quark_layer_config(by_layer[n].routed_prefix, lqc) or glob
        spec = routed if _is_mxfp4(routed) else QUARK_MXFP4_SPEC
        for module in sorted(m for m in chosen if modules[m].layer == n):
            lqc.pop(module, None)  # an exact entry (e.g. the FP8 spec it had)
            if spec != glob or quark_layer_config(module, lqc) is not None:
                first[module] = copy.deepcopy(spec)  # ahead of any pattern that matches it
    if first or "layer_quant_config" in qc:
        qc["layer_quant_config"] = {**first, **lqc}


def _is_mxfp4(spec: Any) -> bool:
    weight = spec.get("weight") if isinstance(spec, dict) else None
    return (
        isinstance(weight, dict)
        and weight.get("dtype") == "fp4"
        and weight.get("group_size") == 32
        and weight.get("scale_format") == "e8m0"
    )

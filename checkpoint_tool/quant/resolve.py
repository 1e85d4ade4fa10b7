"""Resolve every tensor of a checkpoint to its module, role and quantization scheme.

``resolve_tensor`` answers for one name; ``resolve_catalog`` for a whole catalog (plain data:
the config model, name -> ``ResolvedTensor`` and the tensors of each module; config loading is
``quant.configs.load``, re-exported here). What the headers say against the config
(missing scales, wrong dtypes, ...) is a separate step: ``quant.findings.catalog_findings``.
``scheme_differences`` lists the modules vLLM reads differently from their producer.

Example::

    rc = resolve_catalog(open_catalog("/models/quark-mxfp4"))
    t = rc.tensors["model.layers.1.mlp.experts.0.down_proj.weight_scale"]
    t.role, t.scheme.short(), t.scheme.rule
    # ('scale', 'mxfp4/32', "vllm: global_quant_config on FusedMoE layer 'model.layers.1.mlp.experts'")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel

from checkpoint_tool.quant.configs import DeepSeekV4Config, QuantConfig
from checkpoint_tool.quant.configs.base import FLOAT_DTYPES, unquantized
from checkpoint_tool.quant.configs.load import load_quant_config
from checkpoint_tool.quant.configs.names import expert_key, non_linear_reason, split_tensor_name
from checkpoint_tool.quant.roles import ROLE_BY_SUFFIX, SCALE_ROLES, Role
from checkpoint_tool.quant.scheme import Scheme

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

__all__ = [
    "ResolvedCatalog",
    "ResolvedTensor",
    "Role",
    "SchemeDifference",
    "load_quant_config",
    "resolve_catalog",
    "resolve_tensor",
    "scheme_differences",
    "split_tensor_name",
]

Semantics = Literal["vllm", "producer"]
#: module, or (FusedMoE layer, projection) -> scheme (``resolve_tensor``'s ``cache``)
SchemeCache = dict[str | tuple[str, str], Scheme]

#: Quark leaves fused 3-D expert parameters (``X.experts.gate_up_proj`` [E, 2I, H],
#: ``X.experts.down_proj`` [E, H, I]) unquantized in BF16
FUSED_EXPERT_PARAMS = ("gate_up_proj", "down_proj")
FUSED_EXPERT_SUFFIXES = tuple(f".experts.{p}" for p in FUSED_EXPERT_PARAMS)


class ResolvedTensor(NamedTuple):
    """One tensor's module, role and the scheme of its module (with the rule that matched).

    A named tuple: a catalog resolves ~100k of them per checkpoint, and one is built in half
    the time of a frozen dataclass.
    """

    name: str
    module: str
    role: Role
    scheme: Scheme


class SchemeDifference(BaseModel):
    """A module vLLM resolves differently from the producer."""

    module: str
    vllm: Scheme
    producer: Scheme


@dataclass(frozen=True, eq=False)
class ResolvedCatalog:
    """``qconfig``: the config model; ``tensors``: name -> ``ResolvedTensor``; ``modules``:
    module -> parameter suffix -> tensor name (``{"X.down_proj": {"weight": "X.down_proj.weight",
    "weight_scale_inv": "X.down_proj.weight_scale_inv"}}``), both in catalog order.

    Compared and hashed by identity (a catalog's resolution is computed once and shared).
    """

    qconfig: QuantConfig
    tensors: dict[str, ResolvedTensor]
    modules: dict[str, dict[str, str]]

    def weights(self) -> dict[str, ResolvedTensor]:
        """Module -> its resolved ``.weight`` (or fused expert parameter)."""
        return {t.module: t for t in self.tensors.values() if t.role == "weight"}


# -- one tensor --------------------------------------------------------------------------------


def _is_lm_head(module: str) -> bool:
    return module in ("lm_head", "head") or module.endswith(".lm_head")


def _scheme(qconfig: QuantConfig, module: str, semantics: Semantics) -> Scheme:
    if semantics == "producer":
        return qconfig.producer_scheme_for(module)
    scheme = qconfig.scheme_for(module)
    if scheme.quantized and _is_lm_head(module):
        # vLLM builds the LM head as ParallelLMHead (not a LinearBase): Fp8Config, Quark and
        # ModelOpt all leave it unquantized whatever the config says
        rule = f"lm_head: vLLM loads it unquantized (ParallelLMHead); config says {scheme.short()}"
        return unquantized(qconfig.source, rule)
    return scheme


def resolve_tensor(
    qconfig: QuantConfig,
    name: str,
    *,
    dtype: str | None = None,
    shape: tuple[int, ...] | None = None,
    semantics: Semantics = "vllm",
    cache: SchemeCache | None = None,
) -> ResolvedTensor:
    """Role and scheme of one tensor name (``dtype``/``shape`` refine fused expert params).

    A fused 3-D expert parameter (``X.experts.gate_up_proj``) is its own module: its
    ``module`` is the full tensor name. ``cache`` (module, or FusedMoE layer and projection ->
    scheme) saves resolving a module once per sibling tensor and, under vLLM semantics, once
    per routed expert; pass one empty dict per config and semantics.
    """
    module, suffix = split_tensor_name(name)
    return _resolve_split(qconfig, name, module, suffix, dtype, shape, semantics, cache)


def _resolve_split(
    qconfig: QuantConfig,
    name: str,
    module: str,
    suffix: str,
    dtype: str | None,
    shape: tuple[int, ...] | None,
    semantics: Semantics,
    cache: SchemeCache | None,
) -> ResolvedTensor:
    """``resolve_tensor`` for a name already split into ``module`` and ``suffix``."""
    source = qconfig.source
    if suffix in FUSED_EXPERT_PARAMS and module.endswith(".experts"):
        if shape is None or len(shape) == 3:
            if dtype is None or dtype in FLOAT_DTYPES:
                configured = _scheme(qconfig, f"{module}.0.{suffix}", semantics)
                rule = (
                    f"fused 3-D expert parameter left in float by the producer "
                    f"(config alone would give {configured.short()}: {configured.rule})"
                )
                return ResolvedTensor(
                    name=name, module=name, role="weight", scheme=unquantized(source, rule)
                )
            scheme = _scheme(qconfig, f"{module}.0.{suffix}", semantics)
            return ResolvedTensor(name=name, module=name, role="weight", scheme=scheme)
    role = ROLE_BY_SUFFIX.get(suffix, "other")
    if role == "other":
        scheme = unquantized(source, f"parameter {suffix!r}: not a weight, stored as is")
        return ResolvedTensor(name=name, module=module, role=role, scheme=scheme)
    if cache is None:
        scheme = _module_scheme(qconfig, module, semantics)
    else:
        hit = cache.get(module)
        scheme = hit if hit is not None else _cached_module_scheme(qconfig, module, semantics, cache)
    return ResolvedTensor(name, module, role, scheme)


def _module_scheme(qconfig: QuantConfig, module: str, semantics: Semantics) -> Scheme:
    """Scheme of the module holding a weight/scale/bias: lookup table, non-linear or config."""
    scheme = qconfig.table_scheme_for(module)
    if scheme is not None:
        return scheme
    reason = non_linear_reason(module)
    if reason is not None:
        return unquantized(qconfig.source, f"{reason}: never quantized")
    return _scheme(qconfig, module, semantics)


def _cached_module_scheme(
    qconfig: QuantConfig, module: str, semantics: Semantics, cache: SchemeCache
) -> Scheme:
    """``_module_scheme`` through ``cache``, resolving each FusedMoE projection once.

    Under vLLM semantics every routed expert ``X.experts.E.proj`` resolves through its FusedMoE
    layer (``QuantConfigBase.experts_resolve_by_layer``), and the rules above look only at the
    module's last component (``proj``) and its prefix: all E share the key ``(X.experts,
    proj)``. The producer resolved each module on its own (an exclude entry may name one
    expert), so producer semantics share nothing.
    """
    key = None
    if semantics == "vllm" and qconfig.experts_resolve_by_layer:
        key = expert_key(module)
    scheme = cache.get(key) if key is not None else None
    if scheme is None:
        scheme = _module_scheme(qconfig, module, semantics)
        if key is not None:
            cache[key] = scheme
    cache[module] = scheme
    return scheme


# -- vLLM vs producer --------------------------------------------------------------------------


def scheme_differences(qconfig: QuantConfig, modules: list[str]) -> list[SchemeDifference]:
    """Modules whose vLLM scheme differs from the producer's (sorted by module name)."""
    out = []
    for module in sorted(set(modules)):
        if non_linear_reason(module) is not None:
            continue
        a, b = _scheme(qconfig, module, "vllm"), qconfig.producer_scheme_for(module)
        if a.producer_identity() != b.producer_identity():
            out.append(SchemeDifference(module=module, vllm=a, producer=b))
    return out


# -- a whole catalog ---------------------------------------------------------------------------


def resolve_catalog(catalog: Catalog, *, semantics: Semantics = "vllm") -> ResolvedCatalog:
    """Resolve every tensor of ``catalog`` (its config and headers; no tensor data).

    Raises ``InputError`` for an unsupported or malformed quantization config.
    """
    where = str(catalog.root / "config.json")
    qconfig = load_quant_config(catalog.config, catalog.hf_quant_config, where=where)
    cache: SchemeCache = {}
    tensors: dict[str, ResolvedTensor] = {}
    modules: dict[str, dict[str, str]] = {}
    #: one str object per distinct suffix (a few dozen), shared by ~46k module dicts
    suffixes: dict[str, str] = {}
    dtype_shape = catalog.table.dtype_shape
    role_of = ROLE_BY_SUFFIX.get
    for name in catalog.tensors:
        module, _, suffix = name.rpartition(".")
        suffix = suffixes.setdefault(suffix, suffix)
        role = role_of(suffix, "other")
        if role != "other" and suffix not in FUSED_EXPERT_PARAMS:
            # the common case, inline: a weight/scale/bias of a module resolved through the cache
            scheme = cache.get(module)
            if scheme is None:
                scheme = _cached_module_scheme(qconfig, module, semantics, cache)
            t = tensors[name] = ResolvedTensor(name, module, role, scheme)
        else:  # fused 3-D expert parameters (dtype and shape decide) and other parameters
            dtype, shape = dtype_shape(name)
            t = tensors[name] = _resolve_split(
                qconfig, name, module, suffix, dtype, shape, semantics, cache
            )
        parts = modules.get(t.module)
        if parts is None:
            parts = modules[t.module] = {}
        parts[suffix] = name
    if isinstance(qconfig, DeepSeekV4Config):
        tensors.update(_dsv4_float_linears(catalog, qconfig, tensors, modules))
    return ResolvedCatalog(qconfig=qconfig, tensors=tensors, modules=modules)


def _dsv4_float_linears(
    catalog: Catalog,
    qconfig: DeepSeekV4Config,
    tensors: dict[str, ResolvedTensor],
    modules: dict[str, dict[str, str]],
) -> dict[str, ResolvedTensor]:
    """DeepSeek-V4 stores some linears in float with no ``.scale`` (the config cannot say):
    the tensors of such modules, resolved unquantized (name -> replacement)."""
    out: dict[str, ResolvedTensor] = {}
    for parts in modules.values():
        w = parts.get("weight")
        if w is None or tensors[w].role != "weight" or not tensors[w].scheme.quantized:
            continue
        has_scale = any(tensors[n].role in SCALE_ROLES for n in parts.values())
        if catalog.tensors[w].dtype in FLOAT_DTYPES and not has_scale:
            rule = "deepseek_v4: float weight without .scale (module built unquantized)"
            scheme = unquantized(qconfig.source, rule)
            out.update((n, tensors[n]._replace(scheme=scheme)) for n in parts.values())
    return out

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
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel

from checkpoint_tool.catalog.grouping import dense_ids, groups
from checkpoint_tool.quant.configs import DeepSeekV4Config, QuantConfig
from checkpoint_tool.quant.configs.base import FLOAT_DTYPES, unquantized
from checkpoint_tool.quant.configs.load import load_quant_config
from checkpoint_tool.quant.configs.names import (
    expert_key,
    non_linear_reason,
    split_gpt_oss_name,
    split_tensor_name,
)
from checkpoint_tool.quant.resolved import (
    ROLE_CODES,
    ModuleParts,
    ResolvedColumns,
    ResolvedTensor,
    ResolvedTensors,
)
from checkpoint_tool.quant.roles import ROLE_BY_SUFFIX, SCALE_ROLES, Role
from checkpoint_tool.quant.scheme import Scheme

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.catalog.patterns import NamePatterns, Numbered
    from checkpoint_tool.catalog.table import TensorTable

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


class SchemeDifference(BaseModel):
    """A module vLLM resolves differently from the producer."""

    module: str
    vllm: Scheme
    producer: Scheme


@dataclass(frozen=True, eq=False)
class ResolvedCatalog:
    """A catalog resolved, as columns over the catalog's table rows (``ResolvedColumns``),
    with two read-only views made from them on demand:

    - ``tensors``: name -> ``ResolvedTensor``;
    - ``modules``: module -> parameter suffix -> tensor name (``{"X.down_proj": {"weight":
      "X.down_proj.weight", "weight_scale_inv": "X.down_proj.weight_scale_inv"}}``), both in
      catalog order.

    Compared and hashed by identity (a catalog's resolution is computed once and shared).
    """

    qconfig: QuantConfig
    columns: ResolvedColumns

    @property
    def tensors(self) -> ResolvedTensors:
        return ResolvedTensors(self.columns)

    @property
    def modules(self) -> ModuleParts:
        return ModuleParts(self.columns)

    def weights(self) -> dict[str, ResolvedTensor]:
        """Module -> its resolved ``.weight`` (or fused expert parameter)."""
        cols = self.columns
        rows = np.flatnonzero(cols.role == ROLE_CODES["weight"]).tolist()
        return {t.module: t for t in map(cols.record, rows)}


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
    gpt_oss = split_gpt_oss_name(name)
    if gpt_oss is not None:  # X.experts.gate_up_proj_blocks: module X.experts.gate_up_proj
        own, role = gpt_oss
        hit = cache.get(own) if cache is not None else None
        scheme = hit or _module_scheme(qconfig, own, semantics)
        return ResolvedTensor(name=name, module=own, role=role, scheme=scheme)  # type: ignore[arg-type]
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
        scheme = (
            hit if hit is not None else _cached_module_scheme(qconfig, module, semantics, cache)
        )
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

    Resolved by module, not by tensor: the names are split into module and parameter suffix
    per name pattern (``catalog.patterns``), each distinct module is resolved once, and under
    vLLM semantics the routed experts of a (FusedMoE layer, projection) once for all, through
    their first module (see ``_cached_module_scheme``); the tensors take their module's
    scheme through the columns. Raises ``InputError`` for an unsupported or malformed
    quantization config.
    """
    where = str(catalog.root / "config.json")
    qconfig = load_quant_config(catalog.config, catalog.hf_quant_config, where=where)
    table = catalog.table
    patterns = table.patterns()
    heads, tails = patterns.parts(_fused_params(table, patterns), _gpt_oss_heads(patterns))
    module_col, suffix_col = heads.ids.astype(np.int32), tails.ids.astype(np.int32)
    module_names, suffixes = heads.texts, tails.texts
    scheme_ids: dict[int, int] = {}  # id(Scheme) -> index into schemes
    schemes: list[Scheme] = []

    def number(scheme: Scheme) -> int:
        k = scheme_ids.get(id(scheme))
        if k is None:
            k = scheme_ids[id(scheme)] = len(schemes)
            schemes.append(scheme)
        return k

    # per distinct module: its scheme, numbered in module order
    cache: SchemeCache = {}
    group, leads = _scheme_groups(qconfig, semantics, patterns, heads)
    group_scheme = np.fromiter(
        (number(_cached_module_scheme(qconfig, module_names[m], semantics, cache)) for m in leads),
        np.int32,
        len(leads),
    )
    module_scheme = group_scheme[group]
    role_of_suffix_code = np.array(
        [ROLE_CODES[ROLE_BY_SUFFIX.get(x, "other")] for x in suffixes], np.uint8
    )
    role = role_of_suffix_code[suffix_col] if len(table) else np.zeros(0, np.uint8)
    scheme = module_scheme[module_col] if len(table) else np.zeros(0, np.int32)
    # the rest, tensor by tensor: parameters that are no weight, scale or bias, and the fused
    # 3-D expert parameters (own module; dtype and shape decide)
    odd_suffix = np.array(
        [ROLE_BY_SUFFIX.get(x, "other") == "other" or x in FUSED_EXPERT_PARAMS for x in suffixes],
        bool,
    )
    odd = np.flatnonzero(odd_suffix[suffix_col]) if len(table) else np.zeros(0, np.int64)
    for row in odd.tolist():
        name = table.name(row)
        module, _, suffix = name.rpartition(".")
        dtype, shape = table.dtype_shape_of(row)
        t = _resolve_split(qconfig, name, module, suffix, dtype, shape, semantics, cache)
        assert t.module == module_names[module_col[row]], (t.module, name)
        role[row] = ROLE_CODES[t.role]
        scheme[row] = number(t.scheme)
    columns = ResolvedColumns(
        table,
        role,
        scheme,
        module_col,
        suffix_col,
        schemes,
        module_names,
        suffixes,
        heads.form,
        heads.forms,
    )
    if isinstance(qconfig, DeepSeekV4Config):
        _dsv4_float_linears(catalog, qconfig, columns)
    return ResolvedCatalog(qconfig=qconfig, columns=columns)


def _fused_params(table: TensorTable, patterns: NamePatterns) -> np.ndarray:
    """The rows of fused 3-D expert parameters (``X.experts.gate_up_proj`` [E, 2I, H]): each
    is its own module, its whole name."""
    ranks = table.ranks()
    found = [np.zeros(0, np.int64)]
    for k, pattern in enumerate(patterns.patterns):
        module, _, suffix = pattern.rpartition(".")
        if suffix in FUSED_EXPERT_PARAMS and module.endswith(".experts"):
            rows = patterns.rows(k)
            found.append(rows[ranks[rows] == 3])
    return np.concatenate(found)


def _gpt_oss_heads(patterns: NamePatterns) -> dict[int, int]:
    """Name patterns of gpt-oss's expert tensors -> the length of their module's name
    (``X.experts.gate_up_proj_blocks``: ``X.experts.gate_up_proj``)."""
    out = {}
    for k, pattern in enumerate(patterns.patterns):
        split = split_gpt_oss_name(pattern)
        if split is not None:
            out[k] = len(split[0])
    return out


def _scheme_groups(
    qconfig: QuantConfig, semantics: Semantics, patterns: NamePatterns, heads: Numbered
) -> tuple[np.ndarray, list[int]]:
    """Modules that resolve to one scheme object together: per module number its group,
    and each group's first module (ascending). Under vLLM semantics the routed experts of one (FusedMoE
    layer, projection) are one group (``expert_key``: found per module pattern, told apart
    by their digits), every other module a group of its own."""
    group = np.arange(len(heads.texts), dtype=np.int64)
    if semantics != "vllm" or not qconfig.experts_resolve_by_layer:
        return group, list(range(len(heads.texts)))
    keyed: dict[tuple[str, str], list[np.ndarray]] = {}
    for f, form in enumerate(heads.forms):
        if expert_key(form) is None:  # not a routed expert (PREFIX.experts.E.PROJ)
            continue
        head, _, proj = form.rpartition(".")
        prefix = head.rpartition(".")[0]
        modules = np.flatnonzero(heads.form == f)
        rows = heads.first[modules]
        ids = dense_ids(
            patterns.text_ids(rows, 0, form[: len(prefix)]),
            patterns.text_ids(rows, len(head) + 1, proj),
        )
        order, bounds = groups(ids, int(ids.max()) + 1)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            same = modules[order[a:b]]
            text = heads.texts[same[0]]
            keyed.setdefault((text[: len(prefix)], text[len(head) + 1 :]), []).append(same)
    for parts in keyed.values():
        same = np.concatenate(parts)
        group[same] = same.min()  # the group's first module
    leads = np.flatnonzero(group == np.arange(len(group)))  # ascending
    return np.searchsorted(leads, group), leads.tolist()


def _dsv4_float_linears(catalog: Catalog, qconfig: DeepSeekV4Config, cols: ResolvedColumns) -> None:
    """DeepSeek-V4 stores some linears in float with no ``.scale`` (the config cannot say):
    the tensors of such modules are resolved unquantized (their scheme column rewritten)."""
    rule = "deepseek_v4: float weight without .scale (module built unquantized)"
    floating: int | None = None
    scale_codes = [ROLE_CODES[r] for r in SCALE_ROLES]
    for _, rows in cols.rows_by_module():
        weight = next((r for r in rows if cols.suffixes[cols.suffix[r]] == "weight"), None)
        if weight is None or cols.role[weight] != ROLE_CODES["weight"]:
            continue
        if not cols.schemes[cols.scheme[weight]].quantized:
            continue
        if any(cols.role[r] in scale_codes for r in rows):
            continue
        if catalog.table.dtype_shape_of(weight)[0] in FLOAT_DTYPES:
            if floating is None:
                floating = len(cols.schemes)
                cols.schemes.append(unquantized(qconfig.source, rule))
            cols.scheme[rows] = floating

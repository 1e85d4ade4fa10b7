"""Config-shape rules: what vLLM's config loaders do with ``quantization_config`` as written.

They read the raw dict (ckpt's pydantic models fill defaults the engine does not): a Quark
config needs an ``export`` block whose ``kv_cache_group`` is a list (``len()`` is called on
it) and whose groups name ``layer_quant_config`` keys; ``pack_method`` falls back to None;
``layer_type_quant_config`` must be a dict (``.get`` per layer) and ``exclude`` a list.

Example::

    check_unknown_quant_method(ctx, rule)
    # [EngineFinding(rule='config_unknown_quant_method', severity='error', ...)]
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from .context import EngineContext
from .model import EngineFinding, RuleSpec


def _kind(value: object) -> str:
    return "NoneType" if value is None else type(value).__name__


def _quark_raw(ctx: EngineContext) -> dict | None:
    qc = ctx.raw_qc
    if qc is None or str(qc.get("quant_method", "")).lower() != "quark":
        return None
    return qc


def check_unknown_quant_method(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    if ctx.raw_qc is None or ctx.catalog.hf_quant_config:
        return []
    method = ctx.raw_qc.get("quant_method")
    if method is None or str(method).lower() in ctx.target.quant_methods:
        return []
    supported = list(ctx.target.quant_methods)
    return [rule.finding(method=method, supported=supported, target=ctx.target.name)]


def check_export_missing(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    qc = _quark_raw(ctx)
    if qc is None or qc.get("export") is not None:
        return []
    return [rule.finding()]


def _export(ctx: EngineContext) -> dict | None:
    qc = _quark_raw(ctx)
    export = qc.get("export") if qc else None
    return export if isinstance(export, dict) else None


def _wrong_type(
    owner: dict | None, key: str, ok: type | tuple[type, ...], rule: RuleSpec
) -> list[EngineFinding]:
    """A finding when ``owner[key]`` (read with ``.get``) is not an ``ok`` instance; none when
    there is no ``owner``. Example: ``{"exclude": None}``, key "exclude", ok list ->
    ``[finding(kind="NoneType", value="None")]``."""
    if owner is None:
        return []
    value = owner.get(key)
    if isinstance(value, ok):
        return []
    return [rule.finding(kind=_kind(value), value=repr(value))]


#: values vLLM can ``len()`` and iterate; anything else (None, a number) raises there
_SIZED = (list, tuple, str, dict)


def check_kv_cache_group_not_list(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    return _wrong_type(_export(ctx), "kv_cache_group", _SIZED, rule)


def check_kv_cache_group_unmatched(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    export = _export(ctx)
    group = export.get("kv_cache_group") if export else None
    if not isinstance(group, list) or not group:
        return []
    lqc = (ctx.raw_qc or {}).get("layer_quant_config") or {}
    keys = list(lqc) if isinstance(lqc, dict) else []
    if set(group) <= set(keys) or any(
        fnmatch.fnmatchcase(key, pat) for key in keys for pat in group
    ):
        return []
    return [rule.finding(groups=group)]


def check_pack_method_missing(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    export = _export(ctx)
    if export is None or export.get("pack_method") is not None:
        return []
    return [rule.finding()]


def check_layer_type_not_dict(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    return _wrong_type(_quark_raw(ctx), "layer_type_quant_config", dict, rule)


def check_exclude_not_list(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    return _wrong_type(_quark_raw(ctx), "exclude", _SIZED, rule)


def check_exclude_string(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    qc = _quark_raw(ctx)
    value = qc.get("exclude") if qc else None
    if not isinstance(value, str):
        return []
    return [rule.finding(value=value)]


def check_fp8_block_static(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    """``Fp8Config.__init__``: block-wise weights need the dynamic activation scheme."""
    qc = ctx.raw_qc
    if qc is None or str(qc.get("quant_method", "")).lower() not in ("fp8", "deepseek_v4_fp8"):
        return []
    scheme = qc.get("activation_scheme")
    if qc.get("weight_block_size") is None or scheme == "dynamic":
        return []
    return [rule.finding(scheme=scheme)]


def _modelopt_excluded(prefix: str, excludes: list[str]) -> bool:
    """``ModelOptQuantConfigBase.is_layer_excluded`` (quantization/modelopt.py): exact, then
    an entry contained in the name, then fnmatch wildcards."""
    import fnmatch as fn

    return any(e == prefix or e in prefix or fn.fnmatch(prefix, e) for e in excludes)


def check_modelopt_lm_head(ctx: EngineContext, rule: RuleSpec) -> list[EngineFinding]:
    """ModelOpt quantizes ``ParallelLMHead`` unless excluded (``get_quant_method``): a float
    ``lm_head.weight`` then meets quantized parameters."""
    from checkpoint_tool.quant.configs import ModelOptConfig

    entry = ctx.catalog.tensors.get("lm_head.weight")
    if not isinstance(ctx.qconfig, ModelOptConfig) or entry is None:
        return []
    if entry.dtype not in ("BF16", "F16", "F32"):
        return []
    if _modelopt_excluded("lm_head", list(ctx.qconfig.exclude_modules)):
        return []
    return [
        rule.finding(dtype=entry.dtype, algo=ctx.qconfig.quant_algo, tensors=["lm_head.weight"])
    ]


CHECKS: dict[str, Callable[[EngineContext, RuleSpec], list[EngineFinding]]] = {
    "fp8_block_static_activation": check_fp8_block_static,
    "modelopt_lm_head_quantized": check_modelopt_lm_head,
    "config_unknown_quant_method": check_unknown_quant_method,
    "quark_export_missing": check_export_missing,
    "quark_kv_cache_group_not_list": check_kv_cache_group_not_list,
    "quark_kv_cache_group_unmatched": check_kv_cache_group_unmatched,
    "quark_pack_method_missing": check_pack_method_missing,
    "quark_layer_type_config_not_dict": check_layer_type_not_dict,
    "quark_exclude_not_list": check_exclude_not_list,
    "quark_exclude_string": check_exclude_string,
}

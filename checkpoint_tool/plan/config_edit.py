"""config.json for the output: what the loader must see, and what ckpt did.

Edits (everything else is copied as it is):

- ``moe_intermediate_size`` (the family's width key: ``ModelFacts.width_key``, MiniMax's
  ``intermediate_size``) -> the padded size when experts were padded: vLLM allocates each
  expert parameter from it and narrows the checkpoint tensor by ``size // tp`` per rank, so
  the config must say the size the tensors have. Qwen-style ``shared_expert_intermediate_size``
  likewise. DeepSeek-style shared MLPs are ``n_shared_experts * moe_intermediate_size`` wide
  in the loader; the planner pads them to match.
- ``n_routed_experts`` / ``n_shared_experts`` are left alone: the router still scores
  ``n_routed`` experts, and with fused shared experts vLLM appends ``n_shared`` slots after
  them (``n_routed + j``), which is where ckpt wrote the shared experts.
- ``quantization_config``: exact-name entries (Quark ``exclude`` / ``layer_quant_config``
  keys, Fp8 ``ignored_layers`` / ``modules_to_not_convert``) naming a module ckpt renamed or
  redirected are replaced by the new module name(s), so every written tensor is still
  described (a redirected shared expert's spec moves with it to ``experts.{n_routed + j}``).
  Globs and ``re:`` patterns are kept; ``check_schemes`` proves they still resolve the same.
- 3-D fused float experts written per expert (Quark leaves fused expert parameters in BF16
  while its config says e.g. MXFP4 for the layer): their FusedMoE module is added to the
  exclusion list, so the loader builds them unquantized.
- ``ckpt``: conversion metadata (version, source, recipe, options, sizes before/after, fused
  layers). vLLM and transformers ignore unknown config keys.

Example::

    config, notes = edit_config(src_config, geometry=geo, module_renames={...}, metadata={...})
    config["moe_intermediate_size"], config["ckpt"]["moe_intermediate_size"]
    # (192, {'source': 160, 'written': 192})
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from checkpoint_tool.model.config_fields import config_parts
from checkpoint_tool.plan.geometry import Geometry

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.quant.resolve import ResolvedTensor
    from checkpoint_tool.quant.scheme import Scheme

#: quantization_config keys holding lists of module names (or patterns)
_LIST_KEYS = ("exclude", "ignored_layers", "modules_to_not_convert", "exclude_modules")
#: quantization_config keys holding {module name or pattern: spec}
_DICT_KEYS = ("layer_quant_config",)


def is_exact(entry: str) -> bool:
    """An exact module name (not a glob, not a ``re:`` regex)."""
    return not entry.startswith("re:") and not any(c in entry for c in "*?[")


def _set_key(config: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` in every part of config.json that has it (``config_parts``: a multimodal
    wrapper's ``text_config``, where vLLM reads sizes, and/or the top level), so no part keeps
    a stale size; in the part read first when none has it."""
    parts = cast(list[dict[str, Any]], config_parts(config))  # the dicts of ``config`` itself
    for doc in [doc for doc in parts if key in doc] or parts[:1]:
        doc[key] = value


#: a per-layer list of expert widths some configs carry beside their width key (Hunyuan MoE
#: V1: ``moe_intermediate_size: [3072, ...]``, read per layer by vLLM's Transformers backend,
#: ``transformers/moe.py`` ``recursive_replace``)
PER_LAYER_WIDTH_KEY = "moe_intermediate_size"


def _set_per_layer(config: dict[str, Any], key: str, size: int, padded: int) -> None:
    """Entries equal to ``size`` of a per-layer list ``key`` -> ``padded``, in every part."""
    for doc in cast(list[dict[str, Any]], config_parts(config)):
        value = doc.get(key)
        if isinstance(value, list):
            doc[key] = [padded if v == size else v for v in value]


def _rename_list(entries: list[Any], renames: Mapping[str, list[str]]) -> tuple[list[Any], int]:
    out: list[Any] = []
    changed = 0
    for entry in entries:
        if isinstance(entry, str) and is_exact(entry) and entry in renames:
            changed += 1
            out.extend(e for e in renames[entry] if e not in out)
        elif entry not in out:
            out.append(entry)
    return out, changed


def _rename_dict(
    entries: dict[str, Any], renames: Mapping[str, list[str]]
) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    changed = 0
    for key, spec in entries.items():
        if is_exact(key) and key in renames:
            changed += 1
            for new in renames[key]:
                out.setdefault(new, copy.deepcopy(spec))
        else:
            out.setdefault(key, spec)
    return out, changed


def rename_quant_entries(
    qc: dict[str, Any], renames: Mapping[str, list[str]]
) -> tuple[dict[str, Any], list[str]]:
    """``qc`` with exact-name entries renamed; and which keys changed how often."""
    qc = copy.deepcopy(qc)
    changes = []
    for key in _LIST_KEYS:
        if isinstance(qc.get(key), list):
            qc[key], n = _rename_list(qc[key], renames)
            if n:
                changes.append(f"{key}: {n} exact name(s) renamed")
    for key in _DICT_KEYS:
        if isinstance(qc.get(key), dict):
            qc[key], n = _rename_dict(qc[key], renames)
            if n:
                changes.append(f"{key}: {n} exact-name entr(y/ies) renamed")
    return qc, changes


def add_excludes(qc: dict[str, Any], modules: list[str]) -> str | None:
    """Add exact ``modules`` to the config's exclusion list; the key used (None: no list)."""
    key = next(
        (k for k in ("exclude", "ignored_layers", "modules_to_not_convert") if k in qc), None
    )
    if key is None and qc.get("quant_method") in ("fp8", "deepseek_v4_fp8"):
        key = "ignored_layers"
    if key is None:
        return None
    entries = list(qc.get(key) or [])
    entries.extend(m for m in modules if m not in entries)
    qc[key] = entries
    return key


def edit_config(
    config: Mapping[str, Any] | None,
    *,
    geometry: Geometry,
    module_renames: Mapping[str, list[str]],
    metadata: dict[str, Any],
    exclude: list[str] | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """The output config.json (None when the source has none) and notes on what changed."""
    if config is None:
        return None, []
    out = copy.deepcopy(dict(config))
    notes: list[str] = []
    if (
        geometry.size is not None
        and geometry.padded is not None
        and geometry.padded != geometry.size
    ):
        _set_key(out, geometry.size_key, geometry.padded)
        _set_per_layer(out, PER_LAYER_WIDTH_KEY, geometry.size, geometry.padded)
        notes.append(
            f"config.json: {geometry.size_key} {geometry.size} -> {geometry.padded} (padded "
            f"so each of {geometry.moe_tp} rank(s) holds {geometry.padded // geometry.moe_tp})"
        )
    if geometry.shared_size is not None and geometry.shared_padded != geometry.shared_size:
        _set_key(out, geometry.shared_key, geometry.shared_padded)
        notes.append(
            f"config.json: {geometry.shared_key} {geometry.shared_size} -> {geometry.shared_padded}"
        )
    qc = out.get("quantization_config")
    if isinstance(qc, dict) and module_renames:
        out["quantization_config"], changes = rename_quant_entries(qc, module_renames)
        notes.extend(f"quantization_config.{c}" for c in changes)
    if exclude:
        qc = out.get("quantization_config")
        key = add_excludes(qc, exclude) if isinstance(qc, dict) else None
        if key is None:
            notes.append(
                f"unfused float experts {exclude} cannot be excluded in this quantization config; "
                "the loader may expect them quantized"
            )
        else:
            notes.append(f"quantization_config.{key}: + {exclude} (float experts, unfused)")
    out["ckpt"] = metadata
    return out, notes


def _storage_key(scheme: Scheme) -> tuple:
    return scheme.storage_identity()


def check_schemes(
    catalog: Catalog,
    resolved: Mapping[str, ResolvedTensor],
    new_config: Mapping[str, Any] | None,
    provenance: Mapping[str, list[str]],
    renamed_modules: set[str],
    strict_modules: set[str],
) -> list[str]:
    """Does the written config describe each renamed module's output weight as the source
    config described its source name? Both names are resolved the same way (vLLM semantics,
    config only), so this checks exactly what the renames and the config rewrite change.

    A difference on ``strict_modules`` (FSE-redirected shared experts, rewritten exact-name
    entries) is an error; elsewhere one summary note (the config model may not know the
    loader's names, e.g. DeepSeek-V4 names after vLLM's mapper).
    """
    if not renamed_modules or new_config is None:
        return []
    from checkpoint_tool.errors import InputError
    from checkpoint_tool.quant.resolve import load_quant_config, resolve_tensor

    hf_quant = catalog.hf_quant_config
    old_qc = load_quant_config(catalog.config, hf_quant)
    new_qc = load_quant_config(dict(new_config), hf_quant)
    differ: list[str] = []
    for name, src in resolved.items():
        if src.role != "weight" or src.module not in renamed_modules:
            continue
        entry = catalog.tensors[name]
        before = resolve_tensor(old_qc, name, dtype=entry.dtype, shape=entry.shape).scheme
        for out_name in provenance.get(name, []):
            after = resolve_tensor(new_qc, out_name, dtype=entry.dtype, shape=entry.shape).scheme
            if _storage_key(after) == _storage_key(before):
                continue
            message = (
                f"{out_name!r} (from {name!r}) resolves to {after.short()} under the written "
                f"config ({after.rule}) but {name!r} resolved to {before.short()}"
            )
            if src.module in strict_modules:
                raise InputError(
                    f"config.json: {message}; the quantization_config rewrite would describe it "
                    "wrongly: report this, or convert with --fse off"
                )
            differ.append(message)
    if not differ:
        return []
    more = f" (and {len(differ) - 1} more like it)" if len(differ) > 1 else ""
    return [f"check: {differ[0]}{more}"]

"""Completeness rules: config.json and the tensors describe the same model, nothing unexplained.

Uses ``checkpoint_tool.model.model_facts`` (layers, MoE layers, expert counts, names) and
``checkpoint_tool.quant.resolve.resolve_catalog`` (role and scheme of every tensor).

What "explained" means for a tensor: it sits in a layer the config has, an expert index the
layer has (routed, or a fused shared-expert slot ``n_routed + j`` when the shared expert is
not stored apart), and a scale tensor belongs to a stored weight whose scheme names it.

Example findings::

    error [experts_present] model.layers.1.mlp.experts.3.up_proj.weight: missing (layer 1 has
          4 routed experts per config.json)
    error [tensors_explained] model.layers.1.mlp.experts.9.gate_proj.weight: expert 9 is beyond
          layer 1's 4 routed experts (+0 fused shared slots)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Any
from weakref import WeakKeyDictionary

from checkpoint_tool.model import PROJS
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext

#: above this many missing tensors in one layer, one summary finding replaces the list
MAX_PER_LAYER = 8

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERT_RE = re.compile(r"^(?P<prefix>.+)\.experts\.(?P<e>\d+)\.")


def _err(rule: str, message: str, tensor: str | None = None, file: str | None = None) -> Issue:
    return Issue(severity="error", rule=rule, tensor=tensor, file=file, message=message)


def _warn(rule: str, message: str, tensor: str | None = None, file: str | None = None) -> Issue:
    return Issue(severity="warning", rule=rule, tensor=tensor, file=file, message=message)


def skip_sharded(ctx: ValidationContext) -> None:
    if ctx.is_sharded_state:
        raise Unavailable(
            "vLLM sharded-state layout (per-rank engine parameter names); completeness and "
            "scheme rules apply to Hugging Face layouts"
        )


def _file(ctx: ValidationContext, name: str) -> str | None:
    e = ctx.catalog.tensors.get(name)
    return e.file if e else ctx.weight_map.get(name)


def check_config_json(ctx: ValidationContext) -> list[Issue]:
    """config.json exists and is a JSON object (vLLM needs it)."""
    if ctx.config is None:
        return [_err("config_json", f"{ctx.config_error}; restore it", file="config.json")]
    out = []
    if ctx.hf_quant_error:
        out.append(
            _err("config_json", f"{ctx.hf_quant_error}; fix it", file="hf_quant_config.json")
        )
    return out


#: catalog_findings rule -> the validate check that reports it (others: quant_config)
RELAYED_RULES = {
    "weight_dtype": "weight_dtype",
    "scale_dtype": "scale_dtype",
    "scale_shape": "scale_shape",
    "weight_shape": "scale_shape",
    "missing_scale": "scales_present",
    "unexplained_tensor": "tensors_explained",
}


#: the findings of each resolved catalog (``catalog_findings``), computed once for the six
#: checks that relay them; keyed by the ``ResolvedCatalog`` (hashed by identity), kept while it is
_FINDINGS: WeakKeyDictionary[Any, list[Issue]] = WeakKeyDictionary()


def relayed(ctx: ValidationContext, check_id: str) -> list[Issue]:
    """The ``catalog_findings`` that belong to ``check_id`` (one owner per finding)."""
    from checkpoint_tool.model.families import loads_fused_experts
    from checkpoint_tool.quant.findings import catalog_findings

    rc = ctx.resolved()
    issues = _FINDINGS.get(rc)
    if issues is None:
        native = loads_fused_experts(ctx.catalog.config)
        issues = _FINDINGS[rc] = catalog_findings(ctx.catalog, rc, fused_native=native)
    return [i for i in issues if RELAYED_RULES.get(i.rule, "quant_config") == check_id]


def check_quant_config(ctx: ValidationContext) -> list[Issue]:
    """The quantization config is supported, consistent, and each of its name patterns is used."""
    skip_sharded(ctx)
    ctx.require_config()
    error = ctx.resolve_error()
    if error is not None:
        message = error.message.removeprefix(f"{ctx.root / 'config.json'}: ")
        return [_err("quant_config", message, file="config.json")]
    ctx.resolved()
    return relayed(ctx, "quant_config") + _unused_patterns(ctx, engine_modules(ctx))


def engine_modules(ctx: ValidationContext) -> set[str]:
    """Checkpoint modules plus the layer names an engine matches config keys against
    (``X.experts`` for routed experts, ``X.gate_up_proj`` for packed shards)."""
    from checkpoint_tool.quant.configs.names import expert_parts, packed_siblings

    out: set[str] = set()
    for r in ctx.resolved().tensors.values():
        out.add(r.module)
        moe = expert_parts(r.module)
        if moe is not None:
            out.add(moe[0])
        packed = packed_siblings(r.module)
        if packed is not None and "." in r.module:
            out.add(f"{r.module.rsplit('.', 1)[0]}.{packed[0]}")
    return out


def _quant_section(ctx: ValidationContext) -> tuple[str, dict]:
    qc = (ctx.config or {}).get("quantization_config")
    if isinstance(qc, dict):
        return "config.json", qc
    hq = (ctx.hf_quant_config or {}).get("quantization")
    if isinstance(hq, dict):
        return "hf_quant_config.json", hq
    return "", {}


def _pattern_matches(pattern: str, modules: set[str]) -> bool:
    """True if ``pattern`` selects a module under vLLM's or the producer's name matching:
    exact, glob, ``re:`` regex (``re.match``), or vLLM's "layer name is a substring of the key".

    An exact name is looked up first: exclude lists name every attention module of a model
    (hundreds of entries), and a scan of every module per entry grows with their product."""
    if pattern in modules:
        return True
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error:
            return False
        return any(rx.match(m) or rx.match(m + ".weight") for m in modules)
    for m in modules:
        if m == pattern or fnmatch.fnmatchcase(m, pattern):
            return True
        if "*" not in pattern and m in pattern:  # vLLM: layer name a substring of the key
            return True
    return False


def _unused_patterns(ctx: ValidationContext, modules: set[str]) -> list[Issue]:
    """Config name patterns (per-layer specs, excludes) that select no module of the model."""
    file, qc = _quant_section(ctx)
    if not qc:
        return []
    out = []
    keys = qc.get("layer_quant_config")
    for key in sorted(keys) if isinstance(keys, dict) else []:
        if not _pattern_matches(key, modules):
            out.append(
                _err(
                    "quant_config",
                    f"layer_quant_config entry {key!r} matches no module of the checkpoint; its "
                    "spec is silently unused (renamed modules?): fix the key or drop the entry",
                    file=file,
                )
            )
    for field in ("exclude", "exclude_modules", "ignored_layers", "modules_to_not_convert"):
        entries = qc.get(field)
        for pat in entries if isinstance(entries, list) else []:
            if isinstance(pat, str) and not _pattern_matches(pat, modules):
                out.append(
                    _warn(
                        "quant_config",
                        f"{field} entry {pat!r} matches no module of the checkpoint",
                        file=file,
                    )
                )
    return out


def layer_pattern(facts) -> re.Pattern[str]:
    """Regex whose group 1 is the decoder layer index of a tensor name.

    The decoder root comes from the MoE layer prefixes (``model.layers`` /
    ``model.language_model.layers`` / DeepSeek-V4 ``layers``) so that other stacks with
    ``layers`` in their names (vision towers) are not counted; without MoE layers, any
    ``layers.N.`` counts.
    """
    roots = set()
    for m in facts.moe_layers:
        marker = f".{m.layer}."
        if not m.is_mtp and marker in f"{m.prefix}.":
            roots.add(f"{m.prefix}.".split(marker, 1)[0])
    if not roots:
        return _LAYER_RE
    alternatives = "|".join(re.escape(r) for r in sorted(roots))
    return re.compile(rf"^(?:{alternatives})\.(\d+)\.")


def _layer_indices(names: Iterable[str], pattern: re.Pattern[str]) -> dict[int, int]:
    found: dict[int, int] = {}
    for n in names:
        if n.startswith("mtp."):
            continue
        m = pattern.search(n)
        if m:
            found[int(m.group(1))] = found.get(int(m.group(1)), 0) + 1
    return found


def check_layers_present(ctx: ValidationContext) -> list[Issue]:
    """Every decoder layer config.json declares has tensors (MTP layers: warn if absent)."""
    skip_sharded(ctx)
    facts = ctx.facts()
    n = int(facts.num_hidden_layers)
    found = _layer_indices(ctx.all_names, layer_pattern(facts))
    out = []
    missing = [i for i in range(n) if i not in found]
    if missing:
        shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        out.append(
            _err(
                "layers_present",
                f"{len(missing)} of {n} decoder layers have no tensors (layers {shown}); "
                f"config.json says num_hidden_layers={n}: the export is incomplete",
            )
        )
    n_mtp = facts.num_mtp_layers
    # an MTP layer the facts kept has its tensors (under its own root: mtp.layers.K,
    # model.mtp.layers.K, ...; present_mtp_layers keeps only those)
    kept = {m.layer for m in facts.moe_layers if m.is_mtp}
    nextn = [i for i in range(n, n + n_mtp) if i not in found and i not in kept]
    if nextn and not any(n_.startswith("mtp.") for n_ in ctx.all_names):
        out.append(
            _warn(
                "layers_present",
                f"MTP layer(s) {', '.join(map(str, nextn))} declared by config.json are "
                "absent; speculative decoding with them will fail",
            )
        )
    return out


def _fused_slots(layer, names: set[str]) -> bool:
    """Shared experts stored as routed slots ``n_routed + j`` (FSE done offline)."""
    n_routed, n_shared = int(layer.n_routed), int(layer.n_shared or 0)
    if n_shared <= 0 or layer.naming.routed_layout == "fused_3d":
        return False
    return all(
        layer.routed_weight(n_routed + j, p) in names for j in range(n_shared) for p in PROJS
    )


def expected_expert_weights(layer, names: set[str]) -> list[str]:
    """Weight names a MoE layer must store: every routed projection, and the shared expert
    (unless it already lives in fused routed slots)."""
    expected: list[str] = []
    for e in range(int(layer.n_routed)):
        for p in PROJS:
            w = layer.routed_weight(e, p)
            if w not in expected:
                expected.append(w)
    if int(layer.n_shared or 0) > 0 and not _fused_slots(layer, names):
        expected += [f"{m}.weight" for m in layer.shared_modules()]
    return expected


def check_experts_present(ctx: ValidationContext) -> list[Issue]:
    """Every routed expert projection and every shared expert of each MoE layer is stored."""
    skip_sharded(ctx)
    facts = ctx.facts()
    names = ctx.all_names
    out: list[Issue] = []
    for layer in facts.moe_layers:
        missing = [w for w in expected_expert_weights(layer, names) if w not in names]
        out.extend(_missing_findings(layer, missing))
    return out


def _missing_findings(layer, missing: list[str]) -> list[Issue]:
    what = (
        f"MoE layer {layer.layer} has {layer.n_routed} routed and {layer.n_shared or 0} shared "
        "experts per config.json"
    )
    if len(missing) > MAX_PER_LAYER:
        return [
            _err(
                "experts_present",
                f"{len(missing)} expert weights missing ({what}); first: " + ", ".join(missing[:3]),
                tensor=missing[0],
            )
        ]
    return [_err("experts_present", f"weight missing ({what})", tensor=m) for m in missing]


def check_scales_present(ctx: ValidationContext) -> list[Issue]:
    """Every quantized weight has the scale tensors its scheme needs."""
    skip_sharded(ctx)
    return relayed(ctx, "scales_present")


def _unexplained(ctx: ValidationContext, name: str, message: str) -> Issue:
    """A ``tensors_explained`` error about tensor ``name``, filed under the shard holding it."""
    return _err("tensors_explained", message, tensor=name, file=_file(ctx, name))


def check_tensors_explained(ctx: ValidationContext) -> list[Issue]:
    """No tensor config.json cannot explain: extra layers or experts, orphan or stray scales."""
    skip_sharded(ctx)
    facts = ctx.facts()
    names = ctx.all_names
    out: list[Issue] = []
    n_layers = facts.num_hidden_layers + facts.num_mtp_layers
    pattern = layer_pattern(facts)
    for name in sorted(names):
        m = pattern.search(name)
        if m and not name.startswith("mtp.") and int(m.group(1)) >= n_layers:
            out.append(
                _unexplained(
                    ctx,
                    name,
                    f"layer {m.group(1)} is beyond the {n_layers} layers config.json declares",
                )
            )
    out.extend(_extra_experts(ctx, facts, names, pattern))
    try:
        out.extend(relayed(ctx, "tensors_explained"))
    except Unavailable:
        pass
    return out


def _extra_experts(
    ctx: ValidationContext, facts, names: set[str], pattern: re.Pattern[str]
) -> list[Issue]:
    layers = {layer.prefix: layer for layer in facts.moe_layers}
    out = []
    reported: set[tuple[str, int]] = set()
    limits: dict[str, int] = {}
    for name in sorted(names):
        m = _EXPERT_RE.match(name)
        if not m:
            continue
        prefix, e = m.group("prefix"), int(m.group("e"))
        layer = layers.get(prefix)
        if layer is None:
            if pattern.search(name) and (prefix, -1) not in reported:
                reported.add((prefix, -1))
                out.append(
                    _unexplained(
                        ctx,
                        name,
                        f"experts under {prefix}, which config.json does not make a MoE layer",
                    )
                )
            continue
        n_routed, n_shared = int(layer.n_routed), int(layer.n_shared or 0)
        if prefix not in limits:
            limits[prefix] = n_routed + (n_shared if _fused_slots(layer, names) else 0)
        limit = limits[prefix]
        if e >= limit and (prefix, e) not in reported:
            reported.add((prefix, e))
            out.append(
                _unexplained(
                    ctx,
                    name,
                    f"expert {e} is beyond layer {layer.layer}'s {n_routed} routed experts "
                    f"(+{limit - n_routed} fused shared slots) in config.json",
                )
            )
    return out

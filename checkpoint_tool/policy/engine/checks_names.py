"""Name-matching rules: config patterns whose meaning differs between Quark and vLLM.

Per module, ``QuarkConfig.producer_match`` says which pattern decided it when Quark wrote the
file and ``QuarkConfig.vllm_match`` which one decides it in vLLM. A pattern whose set of
decided modules differs between the two readings is reported with the modules concerned and
why (``re:`` keys, keys without ``*`` matching as substrings, ``exclude`` globs,
``layer_type_quant_config``, routed experts resolved per FusedMoE layer); it is an error when
the affected modules' storage differs from what vLLM will build. A pattern that decides no
module under either reading is reported as matching nothing.

Routed experts: vLLM decides per FusedMoE layer, so per layer only experts 0, the last one
and those a pattern names literally (``experts.7.``) are evaluated (90k-tensor checkpoints
stay fast); a glob that singles out other experts is not seen.

Example::

    check_names(ctx, rules)
    # [EngineFinding(rule='name_pattern_differs', message="layer_quant_config entry
    #   're:.*shared_experts.*': vLLM's Quark matcher reads `re:` keys literally ...")]
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from checkpoint_tool.policy.fold import FOLD_MIN, fold_names
from checkpoint_tool.quant.configs import QuarkConfig
from checkpoint_tool.quant.configs.names import expert_parts
from checkpoint_tool.quant.resolve import scheme_differences

from .checks_schemes import matched_key
from .context import EngineContext
from .model import EngineFinding, RuleSpec

NAME_RULES = ("name_pattern_differs", "name_pattern_changes_storage", "name_pattern_unmatched")

_EXCLUDE_RE = re.compile(r"exclude ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") \(")
_EXPERT_IDX_RE = re.compile(r"experts\.(\d+)\.")
_GLOB_CHARS = "*?["

Pattern = tuple[str, str | None]


def winner(qconfig: QuarkConfig, module: str, semantics: str) -> Pattern:
    """``(field, pattern)`` that decided ``module``: ``("exclude", "lm_head")``,
    ``("layer_quant_config", "*self_attn*")``, ``("global_quant_config", None)``."""
    match = qconfig.vllm_match if semantics == "vllm" else qconfig.producer_match
    spec, rule = match(module)
    field, key = matched_key(qconfig, spec)
    if field == "exclude":
        m = _EXCLUDE_RE.search(rule)
        key = ast.literal_eval(m.group(1)) if m else None
    return field, key


def sampled_modules(ctx: EngineContext, patterns: list[Pattern]) -> list[str]:
    """Modules to evaluate: every non-expert module; per FusedMoE layer experts 0, the last,
    and every expert index a pattern names for that layer (``model.layers.61.mlp.experts.7.``
    names expert 7 of layer 61 only; a pattern whose layer part is a glob or a regex names it
    in every layer). Example: an exact-name exclude list of layer 61's 768 expert modules
    samples all 256 experts of layer 61 and 2 of every other layer."""
    everywhere, per_layer = named_experts(patterns)
    by_layer: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    out: list[str] = []
    for module in ctx.linear_modules:
        parts = expert_parts(module)
        if parts is None:
            out.append(module)
        else:
            by_layer[parts[0]][parts[1]].append(module)
    for prefix, experts in by_layer.items():
        named = set(everywhere)
        for where, idx in per_layer.items():  # `layers.61.mlp.experts` names model.layers.61's
            if prefix.endswith(where) or where.endswith(prefix):
                named |= idx
        keep = {min(experts), max(experts)} | (named & experts.keys())
        for e in sorted(keep):
            out.extend(experts[e])
    return out


def named_experts(patterns: list[Pattern]) -> tuple[set[int], dict[str, set[int]]]:
    """Expert indices the patterns name literally: ``(in every layer, {FusedMoE prefix:
    indices})``. ``exclude: model.layers.61.mlp.experts.7.up_proj`` -> ``(set(),
    {"model.layers.61.mlp.experts": {7}})``; ``*experts.7.*`` -> ``({7}, {})``."""
    everywhere: set[int] = set()
    per_layer: dict[str, set[int]] = defaultdict(set)
    for _, pattern in patterns:
        if not pattern:
            continue
        for m in _EXPERT_IDX_RE.finditer(pattern):
            prefix = pattern[: m.start()] + "experts"
            if prefix.startswith("re:") or any(c in prefix for c in _GLOB_CHARS):
                everywhere.add(int(m.group(1)))
            else:
                per_layer[prefix].add(int(m.group(1)))
    return everywhere, per_layer


def other_modules(ctx: EngineContext) -> list[str]:
    """Modules with a ``.weight`` that are not quantizable linears (routers, norms, heads)."""
    linear = set(ctx.linear_modules)
    names = (n[: -len(".weight")] for n in ctx.catalog.tensors if n.endswith(".weight"))
    return sorted({m for m in names if m not in linear})


def config_patterns(qconfig: QuarkConfig) -> list[Pattern]:
    """Every name pattern of a Quark config, in config order."""
    out: list[Pattern] = [("exclude", p) for p in qconfig.exclude]
    out += [("layer_quant_config", k) for k in qconfig.layer_quant_config]
    out += [("layer_type_quant_config", k) for k in qconfig.layer_type_quant_config]
    return out


def why_differs(field: str, pattern: str, affected: list[str]) -> str:
    """Why Quark and vLLM read ``pattern`` differently (the first reason that fits)."""
    experts = any(expert_parts(m) for m in affected)
    if field == "layer_type_quant_config":
        return "vLLM never applies layer_type_quant_config (it looks up a class among string keys)"
    if field == "layer_quant_config" and pattern.startswith("re:"):
        return (
            "vLLM's Quark matcher reads `re:` keys literally (only the DeepSeek-V4 FSE gate "
            "understands them)"
        )
    if (
        field == "exclude"
        and not pattern.startswith("re:")
        and any(c in pattern for c in _GLOB_CHARS)
    ):
        return "vLLM's exclude takes exact names and `re:` regexes, not globs"
    if field == "exclude" and experts:
        return "vLLM matches exclude against the FusedMoE layer name, not per-expert modules"
    if field == "layer_quant_config" and "*" not in pattern:
        return "vLLM matches a key without `*` wherever the layer name is a substring of the key"
    if experts:
        return "vLLM resolves routed experts once per FusedMoE layer, Quark per expert module"
    return "an earlier entry shadows it under one of the two readings"


def check_names(ctx: EngineContext, rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """Findings of the name-matching rules active in ``rules``."""
    if not ctx.is_quark:
        return []
    qconfig = ctx.quark
    patterns = config_patterns(qconfig)
    if not patterns:
        return []
    producer: dict[Pattern, set[str]] = defaultdict(set)
    vllm: dict[Pattern, set[str]] = defaultdict(set)
    sample = sampled_modules(ctx, patterns)
    linear = set(sample)
    for module in sample:
        producer[winner(qconfig, module, "producer")].add(module)
        vllm[winner(qconfig, module, "vllm")].add(module)
    idle = [p for p in dict.fromkeys(patterns) if not producer.get(p) and not vllm.get(p)]
    if idle:
        # routers, norms, MTP heads: excluded by name although never quantized
        for module in other_modules(ctx):
            for sem, found in (("producer", producer), ("vllm", vllm)):
                found[winner(qconfig, module, sem)].add(module)
    rows: list[dict[str, Any]] = []
    seen: set[Pattern] = set()
    for pat in patterns:
        if pat in seen:
            continue
        seen.add(pat)
        field, pattern = pat
        p_set, v_set = producer.get(pat, set()), vllm.get(pat, set())
        if field == "layer_quant_config" and (pattern or "").startswith("re:") and not p_set:
            # neither Quark's fnmatch nor vLLM's matcher reads it; what it was written for is
            # what the regex names (as the DeepSeek-V4 FSE gate reads it: fullmatch)
            p_set = _regex_modules((pattern or "")[3:], sample)
        if not p_set and not v_set:
            rows.append({"rule": "name_pattern_unmatched", "field": field, "pattern": pattern})
            continue
        p_set = {m for m in p_set if m in linear}
        v_set = {m for m in v_set if m in linear}
        if p_set == v_set:
            continue
        rows.append(_differs(ctx, field, pattern or "", p_set, v_set))
    return fold_findings([r for r in rows if r["rule"] in rules], rules)


#: what must agree for entries to be reported as one finding
_FOLD_KEY = ("rule", "field", "why", "vllm_scheme", "producer_scheme")


def fold_findings(rows: list[dict[str, Any]], rules: dict[str, RuleSpec]) -> list[EngineFinding]:
    """One finding per rule, config field, reason and pair of schemes: entries that differ only
    in their name (768 exact-name excludes of one MTP layer's experts) are one finding whose
    message gives their folded pattern and count; ``details["patterns"]`` lists every entry.

    Example row: ``{"rule": "name_pattern_differs", "field": "exclude", "pattern":
    "model.layers.61.mlp.experts.0.down_proj", "why": ..., "modules": [...], ...}``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in _FOLD_KEY), []).append(row)
    out = []
    batches = [
        b for g in groups.values() for b in ([g] if len(g) >= FOLD_MIN else [[r] for r in g])
    ]
    for group in batches:
        first = group[0]
        spec = rules[first["rule"]]
        patterns = [str(r["pattern"]) for r in group]
        if len(group) == 1:
            entries = f"entry {first['pattern']!r}"
        else:
            entries = f"entries {fold_names(patterns)!r} ({len(group)} entries)"
        if first["rule"] == "name_pattern_unmatched":
            details: dict[str, Any] = {"field": first["field"]}
            if len(group) > 1:
                details["patterns"] = patterns
            out.append(
                spec.finding(
                    field=first["field"],
                    pattern=first["pattern"],
                    entries=entries,
                    details=details,
                )
            )
            continue
        modules = sorted({m for r in group for m in r["modules"]})
        n_producer = sum(r["n_producer"] for r in group)
        n_vllm = sum(r["n_vllm"] for r in group)
        details = {
            "field": first["field"],
            "pattern": first["pattern"] if len(group) == 1 else fold_names(patterns),
            "quark_modules": n_producer,
            "vllm_modules": n_vllm,
        }
        if len(group) > 1:
            details["patterns"] = patterns
        out.append(
            spec.finding(
                modules=modules,
                layers=sorted({x for r in group for x in r["layers"]}),
                field=first["field"],
                pattern=first["pattern"],
                entries=entries,
                why=first["why"],
                n_producer=n_producer,
                n_vllm=n_vllm,
                n_affected=len(modules),
                vllm_scheme=first["vllm_scheme"],
                producer_scheme=first["producer_scheme"],
                details=details,
            )
        )
    return out


def _differs(
    ctx: EngineContext,
    field: str,
    pattern: str,
    p_set: set[str],
    v_set: set[str],
) -> dict[str, Any]:
    """The row of one pattern whose module sets differ between the two readings."""
    affected = sorted(p_set ^ v_set)
    if field == "layer_quant_config" and pattern.startswith("re:"):
        diffs = _regex_key_differences(ctx, pattern, affected)
    else:
        diffs = scheme_differences(ctx.quark, affected)
    changed = sorted(d.module for d in diffs)
    sample = diffs[0] if diffs else None
    vllm_scheme = sample.vllm.short() if sample else _scheme(ctx, affected[0], "vllm")
    producer_scheme = sample.producer.short() if sample else _scheme(ctx, affected[0], "producer")
    layers = sorted(
        {
            i
            for m in affected
            if (p := expert_parts(m)) and (i := ctx.moe_layer_index(p[0])) is not None
        }
    )
    return {
        "rule": "name_pattern_changes_storage" if changed else "name_pattern_differs",
        "field": field,
        "pattern": pattern,
        "why": why_differs(field, pattern, affected),
        "modules": changed or affected,
        "layers": layers,
        "n_producer": len(p_set),
        "n_vllm": len(v_set),
        "vllm_scheme": vllm_scheme,
        "producer_scheme": producer_scheme,
    }


def _regex_key_differences(ctx: EngineContext, pattern: str, modules: list[str]) -> list[Any]:
    """Modules the ``re:`` key was meant for whose vLLM scheme stores something else."""
    from checkpoint_tool.quant.configs.quark_spec import scheme_from_spec
    from checkpoint_tool.quant.resolve import SchemeDifference

    meant = scheme_from_spec(ctx.quark.layer_quant_config[pattern], f"re: key {pattern!r}")
    out = []
    for module in modules:
        got = ctx.quark.scheme_for(module)
        if got.producer_identity() != meant.producer_identity():
            out.append(SchemeDifference(module=module, vllm=got, producer=meant))
    return out


def _regex_modules(regex: str, modules: list[str]) -> set[str]:
    try:
        rx = re.compile(regex)
    except re.error:
        return set()
    return {m for m in modules if rx.fullmatch(m)}


def _scheme(ctx: EngineContext, module: str, semantics: str) -> str:
    q = ctx.quark
    return (q.scheme_for(module) if semantics == "vllm" else q.producer_scheme_for(module)).short()


CHECKS: dict[str, Callable[..., list[EngineFinding]]] = {}

"""Consistency of the checkpoint with its config, seen from the MoE structure and the patterns.

``resolve_catalog`` already reports per-tensor findings (missing or mis-shaped scales,
scale tensors the config does not explain, packed shards resolving to different schemes,
weights whose dtype contradicts the config). This module adds what needs the model facts or
the whole config:

- ``moe_structure_issues``: routed experts missing for a MoE layer, expert indices beyond
  ``n_routed``, expert tensors on layers config.json declares dense, shared experts the config
  does not declare (or missing ones);
- ``unmatched_pattern_issues``: ``exclude`` / ``layer_quant_config`` / ``ignored_layers`` /
  ``exclude_modules`` entries that match no module under any reading (exact, substring as
  vLLM reads exact keys, ``fnmatch`` glob, ``re:`` regex) -- the "silently discarded" failure.

Example::

    moe_structure_issues(facts, cat.tensors)
    # [Issue(severity="error", rule="moe_expert_missing",
    #        tensor="model.layers.3.mlp.experts.7.down_proj.weight",
    #        message="model.layers.3.mlp.experts: 1 routed expert weight(s) missing ...")]
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from checkpoint_tool.catalog.grouping import dense_ids, groups
from checkpoint_tool.catalog.patterns import NamePatterns
from checkpoint_tool.catalog.table import TableTensors
from checkpoint_tool.model import PROJS, ModelFacts, MoeLayerFacts
from checkpoint_tool.model.naming import has_weight
from checkpoint_tool.policy.fold import batches, fold_names
from checkpoint_tool.quant.configs import (
    DeepSeekFp8Config,
    DeepSeekV4Config,
    ModelOptConfig,
    QuarkConfig,
)
from checkpoint_tool.report import Issue

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import TensorEntry
    from checkpoint_tool.quant.configs import QuantConfig


def _issue(
    rule: str, message: str, tensor: str | None, entries: Mapping[str, TensorEntry]
) -> Issue:
    entry = entries.get(tensor) if tensor else None
    return Issue(
        severity="error",
        rule=rule,
        tensor=tensor,
        file=entry.file if entry is not None else None,
        message=message,
    )


#: greedy: the last ``.experts.`` / ``.shared_expert(s).`` of a name; groups: prefix, kind,
#: next component (expert index or parameter/projection name). Run on name patterns
#: (``catalog.patterns``): its literal parts hold no digit, so a match spans the same
#: characters in every name of a pattern
_EXPERT_RE = re.compile(r"^(.+)\.(experts|shared_experts|shared_expert)\.([^.\n]+)")
#: a routed expert's weight ``{routed prefix}.{e}.{leaf}.weight``; groups: routed prefix,
#: expert index, leaf
_ROUTED_WEIGHT_RE = re.compile(r"^(.+\.experts)\.(\d+)\.([^.]+)\.(?:weight|weight_packed)$")


def scan_expert_tensors(patterns: NamePatterns) -> dict[str, dict[str, Any]]:
    """MoE prefix -> routed expert indices, 3-D params, shared names, read per name pattern.

    ``model.layers.3.mlp.experts.7.w1.weight`` -> prefix ``model.layers.3.mlp``, index 7;
    ``...mlp.shared_experts.gate_proj.weight`` -> prefix ``...mlp``, shared (``shared`` holds
    ``prefix.kind.next`` stems, sorted). The ~92k names of a DeepSeek-R1 are ~95 patterns: a pattern's names are split by the text of their prefix,
    and their expert indices read as one array, a layer's 256 experts at once.
    """
    out: dict[str, dict[str, Any]] = {}
    for k, m in patterns.matching(_EXPERT_RE):
        end, (a, b), kind = m.end(1), m.span(3), m.group(2)
        rows = patterns.rows(k)
        if kind != "experts":  # a shared expert: one stem per prefix and next component
            ids = dense_ids(
                patterns.text_ids(rows, 0, m.group(1)), patterns.text_ids(rows, a, m.group(3))
            )
        else:
            ids = patterns.text_ids(rows, 0, m.group(1))
        index = patterns.numbers(rows, a, b) if kind == "experts" and m.group(3).isdigit() else None
        for same in _grouped(rows, ids):
            first = int(rows[same[0]])
            prefix = patterns.text(first, 0, end)
            g = out.setdefault(prefix, {"experts": set(), "fused": False, "shared": set()})
            if kind != "experts":
                g["shared"].add(f"{prefix}.{kind}.{patterns.text(first, a, b)}")
            elif index is not None:  # an expert index
                g["experts"].update(index[same].tolist())
            else:
                g["fused"] = True
    for g in out.values():
        g["shared"] = sorted(g["shared"])
    return out


def routed_weights_present(patterns: NamePatterns) -> dict[tuple[str, str], np.ndarray]:
    """``(routed prefix, leaf)`` -> the experts ``e`` whose ``{prefix}.{e}.{leaf}.weight`` is
    a name (``e`` written as ``str(e)`` writes it, up to 18 digits), e.g.
    ``("model.layers.3.mlp.experts", "down_proj") -> array([0, 1, ..., 255])``."""
    out: dict[tuple[str, str], list[np.ndarray]] = {}
    for k, m in patterns.matching(_ROUTED_WEIGHT_RE):
        end, (a, b), (c, d) = m.end(1), m.span(2), m.span(3)
        if m.group(2).strip("0") or b - a > 18:  # not as str(e) writes an expert count's e
            continue
        rows = patterns.rows(k)
        e = patterns.numbers(rows, a, b)
        canonical = e >= 10 ** (b - a - 1) if b - a > 1 else np.ones(len(e), bool)  # no 0 lead
        ids = dense_ids(
            patterns.text_ids(rows, 0, m.group(1)), patterns.text_ids(rows, c, m.group(3))
        )
        for same in _grouped(rows, ids):
            first = int(rows[same[0]])
            key = (patterns.text(first, 0, end), patterns.text(first, c, d))
            out.setdefault(key, []).append(e[same][canonical[same]])
    return {key: np.concatenate(parts) for key, parts in out.items()}


def _grouped(rows: np.ndarray, ids: np.ndarray) -> list[np.ndarray]:
    """Positions into ``rows`` of each number of ``ids``: ``[array([0, 2]), array([1])]``."""
    order, bounds = groups(ids, int(ids.max()) + 1 if len(ids) else 0)
    return [order[x:y] for x, y in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]


def moe_structure_issues(
    facts: ModelFacts,
    entries: Mapping[str, TensorEntry],
    prefused: Mapping[int, list[int]] | None = None,
) -> list[Issue]:
    """Structural findings; ``entries`` maps tensor names to catalog entries (shape, file).

    ``prefused`` (``policy.prefused.prefused_slots``): MoE layer -> routed slots a previous
    ``ckpt convert`` filled with the shared experts; those slots are expected, the shared
    MLP is not (a missing slot weight is an error).

    Routed experts of one layer cannot resolve to different schemes: vLLM resolves the
    FusedMoE layer once (and ``resolve_catalog`` flags weights whose dtype disagrees)."""
    issues: list[Issue] = []
    if isinstance(entries, TableTensors):
        patterns = entries.table.patterns()
    else:
        patterns = NamePatterns.of_names(entries)
    scan = scan_expert_tensors(patterns)
    present = routed_weights_present(patterns)
    moe = {m.prefix: m for m in facts.moe_layers}
    for prefix, g in sorted(scan.items()):
        if prefix in moe:
            continue
        shared_only = not g["experts"] and not g["fused"]
        what = "shared expert" if shared_only else "routed expert"
        stem = g["shared"][0] if shared_only else f"{prefix}.experts"
        tensor = _first_name(entries, stem + ".") or _first_name(entries, stem)
        issues.append(
            _issue(
                "moe_layer_unexplained",
                f"{prefix}: {what} tensors on a layer config.json does not declare as MoE "
                f"({facts.family}: MoE layers are {_ranges(facts.moe_layer_indices)}); "
                "fix config.json or drop the stale tensors",
                tensor,
                entries,
            )
        )
    for layer in facts.moe_layers:
        slots = (prefused or {}).get(layer.layer, [])
        issues += _layer_issues(layer, scan.get(layer.prefix), present, entries, slots)
    return issues


def _layer_issues(
    layer: MoeLayerFacts,
    g: dict[str, Any] | None,
    present: Mapping[tuple[str, str], np.ndarray],
    entries: Mapping[str, TensorEntry],
    slots: list[int] | None = None,
) -> list[Issue]:
    issues: list[Issue] = []
    routed = layer.routed_prefix
    if layer.naming.routed_layout == "fused_3d":
        for proj in ("gate", "down"):
            name = layer.routed_weight(0, proj)
            entry = entries.get(name)
            if entry is None:
                issues.append(
                    _issue(
                        "moe_expert_missing",
                        f"{routed}: fused expert tensor {name!r} is missing",
                        None,
                        entries,
                    )
                )
            elif len(entry.shape) != 3 or entry.shape[0] != layer.n_routed:
                issues.append(
                    _issue(
                        "moe_expert_count",
                        f"shape {list(entry.shape)} holds {entry.shape[0]} experts, config.json "
                        f"says n_routed = {layer.n_routed}",
                        name,
                        entries,
                    )
                )
    else:
        missing = _missing_routed_weights(layer, present)
        if missing:
            issues.append(
                _issue(
                    "moe_expert_missing",
                    f"{routed}: {len(missing)} routed expert weight(s) missing of "
                    f"{layer.n_routed} experts (first: {missing[0]}); the checkpoint is "
                    "incomplete or config.json's expert count is wrong",
                    None,
                    entries,
                )
            )
    fused = set(slots or ())
    extra = sorted(
        e for e in (g or {}).get("experts", ()) if e >= layer.n_routed and e not in fused
    )
    if fused and layer.naming.routed_layout != "fused_3d":
        leaves = sorted({layer.routed_module(0, p).rsplit(".", 1)[1] for p in PROJS})
        absent = [
            name
            for e in sorted(fused)
            for leaf in leaves
            if (name := f"{routed}.{e}.{leaf}.{layer.naming.weight_suffix}") not in entries
        ]
        if absent:
            issues.append(
                _issue(
                    "fse_slot_missing",
                    f"{routed}: config.json ckpt.fse_slots names slot(s) {sorted(fused)} but "
                    f"{len(absent)} slot weight(s) are missing (first: {absent[0]}); the "
                    "output of ckpt convert is incomplete: convert again",
                    None,
                    entries,
                )
            )
    if extra:
        tensor = _first_name(entries, f"{routed}.{extra[0]}.")
        issues.append(
            _issue(
                "moe_expert_unexplained",
                f"{routed}: expert index(es) {_ranges(extra)} beyond n_routed = "
                f"{layer.n_routed} from config.json; they would be dropped",
                tensor,
                entries,
            )
        )
    shared_names = (g or {}).get("shared", [])
    if layer.n_shared == 0 and shared_names:
        issues.append(
            _issue(
                "shared_expert_unexplained",
                f"{layer.prefix}: shared expert tensors, but config.json declares no shared "
                "experts; they would be dropped",
                _first_name(entries, shared_names[0] + ".")
                or _first_name(entries, shared_names[0]),
                entries,
            )
        )
    elif layer.n_shared > 0 and not fused:
        missing = [f"{m}.weight" for m in layer.shared_modules() if not has_weight(m, entries)]
        if missing:
            issues.append(
                _issue(
                    "shared_expert_missing",
                    f"{layer.shared_prefix}: shared expert weight(s) missing "
                    f"({', '.join(missing)}); config.json declares {layer.n_shared}",
                    None,
                    entries,
                )
            )
    return issues


def _missing_routed_weights(
    layer: MoeLayerFacts, present: Mapping[tuple[str, str], np.ndarray]
) -> list[str]:
    """Names of the per-expert routed weights the layer should have and lacks, sorted."""
    base = layer.routed_prefix
    leaves = sorted({layer.routed_module(0, p).rsplit(".", 1)[1] for p in PROJS})
    missing = []
    for leaf in leaves:
        held = np.zeros(layer.n_routed, bool)
        found = present.get((base, leaf))
        if found is not None:
            held[found[found < layer.n_routed]] = True
        suffix = layer.naming.weight_suffix
        missing += [f"{base}.{e}.{leaf}.{suffix}" for e in np.flatnonzero(~held).tolist()]
    return sorted(missing)


# -- config patterns -------------------------------------------------------------------------


def config_patterns(qconfig: QuantConfig) -> list[tuple[str, str]]:
    """``(where, pattern)`` for every name pattern of a config, e.g. ``("exclude", "lm_head")``."""
    if isinstance(qconfig, QuarkConfig):
        return [("exclude", p) for p in qconfig.exclude] + [
            ("layer_quant_config", p) for p in qconfig.layer_quant_config
        ]
    if isinstance(qconfig, (DeepSeekFp8Config, DeepSeekV4Config)):
        return [("ignored_layers", p) for p in qconfig.ignored]
    if isinstance(qconfig, ModelOptConfig):
        return [("exclude_modules", p) for p in qconfig.exclude_modules]
    return []


_FUSED_NAMES = {
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
    "w1": "gate_up_proj",
    "w3": "gate_up_proj",
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "q_a_proj": "fused_qkv_a_proj",
    "kv_a_proj_with_mqa": "fused_qkv_a_proj",
}


def layer_names(names: Iterable[str]) -> set[str]:
    """Every layer a pattern could name: the module of each tensor, the FusedMoE layer of
    routed experts (``X.experts``) and vLLM's fused names (``X.gate_up_proj`` for
    ``X.gate_proj``, ``X.qkv_proj``, ...)."""
    out: set[str] = set()
    for name in names:
        module = name.rsplit(".", 1)[0] if "." in name else name
        if module in out:
            continue
        out.add(module)
        parent, _, leaf = module.rpartition(".")
        if leaf in _FUSED_NAMES:
            out.add(f"{parent}.{_FUSED_NAMES[leaf]}")
        i = module.find(".experts.")
        if i >= 0:
            out.add(module[: i + 8])
    return out


def pattern_matches_any(pattern: str, layers: set[str], ordered: list[str]) -> bool:
    """Does ``pattern`` name at least one layer under any reading of it (exact, vLLM's
    "layer name is a substring of the key", fnmatch glob, ``re:`` regex)?"""
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error:
            return False
        return any(rx.match(m) for m in ordered)
    if pattern in layers:
        return True
    if any(ch in pattern for ch in "*?["):
        rx = re.compile(fnmatch.translate(pattern))
        return any(rx.match(m) for m in ordered)
    parts = pattern.split(".")
    return any(".".join(parts[:k]) in layers for k in range(len(parts) - 1, 0, -1))


def unmatched_pattern_issues(qconfig: QuantConfig, names: Iterable[str], where: str) -> list[Issue]:
    """A warning for the config patterns that name no module of the checkpoint: one per config
    field, with the entries folded into one pattern and counted when there are many
    (``exclude entries 'model.layers.{90..99}.mlp.gate' (10 entries) match no module``)."""
    patterns = config_patterns(qconfig)
    if not patterns:
        return []
    layers = layer_names(names)
    ordered = sorted(layers)
    stale: dict[str, list[str]] = {}
    for field, pattern in patterns:
        if not pattern_matches_any(pattern, layers, ordered):
            stale.setdefault(field, []).append(pattern)
    issues = []
    for field, found in [(f, b) for f, all_ in stale.items() for b in batches(all_)]:
        entries = (
            f"entry {found[0]!r}"
            if len(found) == 1
            else f"entries {fold_names(found)!r} ({len(found)} entries, first {found[0]!r})"
        )
        issues.append(
            Issue(
                severity="warning",
                rule="pattern_unmatched",
                file=where,
                message=f"{field} {entries} match(es) no module of the checkpoint; "
                "its setting applies to nothing (stale entry, or a rename that lost it)",
            )
        )
    return issues


def _first_name(entries: Mapping[str, Any], prefix: str) -> str | None:
    for name in entries:
        if name.startswith(prefix):
            return name
    return None


def _ranges(values: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    vals = sorted(set(values))
    if not vals:
        return "none"
    out, start, prev = [], vals[0], vals[0]
    for v in [*vals[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if v is not None:
            start = prev = v
    return ", ".join(out)

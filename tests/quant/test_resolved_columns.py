"""The column methods of a resolved catalog against the answer record by record, on synthetic
checkpoints: module classes (``ResolvedColumns.module_classes``), and the MoE scan read per
name pattern (``policy.consistency``) against a regex over each name."""

from __future__ import annotations

import re

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.policy.consistency import routed_weights_present, scan_expert_tensors
from checkpoint_tool.quant.resolve import resolve_catalog, resolve_tensor

PRESETS = ["deepseek-v3-fp8", "quark-hybrid", "deepseek-v4", "qwen3-moe", "quark-mxfp4"]
#: the scan's rule, name by name (as it was written before the patterns)
_EXPERT_RE = re.compile(r"^(.+)\.(experts|shared_experts|shared_expert)\.([^.\n]+)")


@pytest.fixture(scope="module", params=PRESETS)
def opened(request, synth_ckpt):
    cat = open_catalog(synth_ckpt(request.param))
    return cat, resolve_catalog(cat)


def test_module_classes_group_modules_with_the_same_tensors(opened):
    cat, rc = opened
    cols = rc.columns
    signature: dict[str, list[tuple]] = {}
    for t in rc.tensors.values():
        e = cat.tensors[t.name]
        suffix = cols.suffixes[cols.suffix[cat.table.row_of(t.name)]]
        signature.setdefault(t.module, []).append((suffix, t.role, id(t.scheme), e.dtype, e.shape))
    classes = cols.module_classes().tolist()
    by_signature: dict[tuple, int] = {}
    for module, k in zip(cols.module_names, classes, strict=True):
        assert by_signature.setdefault(tuple(signature[module]), k) == k  # same tensors, same class
    assert len(set(by_signature.values())) == len(by_signature)  # other tensors, other class


def test_expert_scan_per_pattern_equals_the_scan_per_name(opened):
    cat, _ = opened
    want: dict[str, dict] = {}
    for name in cat.tensors:
        m = _EXPERT_RE.match(name)
        if m is None:
            continue
        prefix, kind, head = m.groups()
        g = want.setdefault(prefix, {"experts": set(), "fused": False, "shared": set()})
        if kind != "experts":
            g["shared"].add(f"{prefix}.{kind}.{head}")
        elif head.isdigit():
            g["experts"].add(int(head))
        else:
            g["fused"] = True
    for g in want.values():
        g["shared"] = sorted(g["shared"])
    patterns = cat.table.patterns()
    assert scan_expert_tensors(patterns) == want
    present = {k: sorted(v.tolist()) for k, v in routed_weights_present(patterns).items()}
    weight = re.compile(r"^(.+\.experts)\.(0|[1-9][0-9]*)\.([^.]+)\.weight$")
    expected: dict[tuple[str, str], list[int]] = {}
    for name in cat.tensors:
        if m := weight.match(name):
            expected.setdefault((m[1], m[3]), []).append(int(m[2]))
    assert present == {k: sorted(v) for k, v in expected.items()}


def test_resolved_columns_equal_resolving_each_tensor(opened):
    cat, rc = opened
    cache: dict = {}
    v4 = cat.config.get("model_type") == "deepseek_v4"  # float linears: scheme rewritten after
    for name, e in cat.tensors.items():
        want = resolve_tensor(rc.qconfig, name, dtype=e.dtype, shape=e.shape, cache=cache)
        got = rc.tensors[name]
        assert (got.module, got.role) == (want.module, want.role), name
        assert v4 or got.scheme == want.scheme, name

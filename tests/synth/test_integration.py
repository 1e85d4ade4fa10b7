"""Every preset reads back as its producer meant, through the project's own resolution."""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.model import model_facts
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import resolve_catalog
from checkpoint_tool.synth import PRESETS

#: (preset, tensor) issues known to come from the reader side, not the layout
KNOWN: set[tuple[str, str]] = set()


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_resolves_without_errors(synth_ckpt, preset):
    cat = open_local(synth_ckpt(preset))
    issues = [
        i
        for i in catalog_findings(cat, resolve_catalog(cat))
        if i.severity == "error" and (preset, i.tensor) not in KNOWN
    ]
    assert not issues, [f"{i.tensor}: {i.message}" for i in issues[:3]]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_model_facts_see_every_moe_layer(synth_ckpt, preset):
    cat = open_local(synth_ckpt(preset))
    facts = model_facts(cat.config, cat.tensors.keys())
    spec = PRESETS[preset]
    main = [m for m in facts.moe_layers if not m.is_mtp]
    assert len(main) == spec.tiny.num_layers - spec.tiny.first_dense
    assert all(m.n_routed == spec.tiny.n_routed for m in main)
    assert all(m.moe_intermediate_size == spec.tiny.moe_intermediate for m in main)


SMALL = {"num_layers": 2, "n_routed": 3, "n_shared": 2, "hidden": 128, "moe_intermediate": 64}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_options_give_consistent_checkpoints(synth_ckpt, preset):
    """Changed sizes (incl. two shared experts) still resolve cleanly and agree with config."""
    shared = PRESETS[preset].tiny.n_shared > 0  # qwen3-moe: the family has no shared expert
    cat = open_local(synth_ckpt(preset, **(SMALL if shared else {**SMALL, "n_shared": 0})))
    issues = [
        i
        for i in catalog_findings(cat, resolve_catalog(cat))
        if i.severity == "error" and (preset, i.tensor) not in KNOWN
    ]
    assert not issues, [f"{i.tensor}: {i.message}" for i in issues[:3]]
    facts = model_facts(cat.config, cat.tensors.keys())
    main = [m for m in facts.moe_layers if not m.is_mtp]
    assert main and all(m.n_routed == 3 for m in main)
    assert all(m.shared_intermediate_size == (128 if shared else 0) for m in main)

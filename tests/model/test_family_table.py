"""Every model family gives the facts its per-family builder gave, now that families are data.

``facts_snapshot.json`` was written by the per-family builders (``model/families/
deepseek_v3.py`` & co., before they were replaced by ``families_data/families.yaml``) over
every synth preset (tiny and full dims, fused experts where the preset has them, with and
without tensor names) and a few hand-written configs for families or layouts no preset has
(GLM-4.5, Kimi-K2, DeepSeek-V2 with ``moe_layer_freq``, Qwen3-Next, converted DeepSeek-V4
names with the MTP block kept or moved, a Qwen3.5 wrapper over text-model names). Each case keeps a readable summary (compared
first, so a failure says what moved) and the sha256 of the full ``ModelFacts`` dump.

Regenerate (only when a change of facts is intended)::

    PYTHONPATH=. python tests/model/test_family_table.py
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint_tool.model import ModelFacts, model_facts

from .test_families import R1

SNAPSHOT = Path(__file__).with_name("facts_snapshot.json")

Case = Callable[[], tuple[dict[str, Any], dict[str, tuple[int, ...]] | None]]

HAND: dict[str, dict[str, Any]] = {
    "r1": R1,
    "kimi-k2": {
        **R1,
        "model_type": "kimi_k2",
        "n_routed_experts": 384,
        "num_nextn_predict_layers": 0,
    },
    "deepseek-v2-freq": {
        **R1,
        "model_type": "deepseek_v2",
        "num_hidden_layers": 8,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 2,
        "n_shared_experts": 2,
        "num_nextn_predict_layers": 0,
    },
    "glm-4.5": {
        "model_type": "glm4_moe",
        "hidden_size": 5120,
        "num_hidden_layers": 92,
        "first_k_dense_replace": 3,
        "n_routed_experts": 160,
        "n_shared_experts": 1,
        "moe_intermediate_size": 1536,
        "num_experts_per_tok": 8,
        "num_nextn_predict_layers": 1,
        "moe_layer_freq": 3,
    },
    "glm-by-architecture": {
        "architectures": ["Glm4MoeForCausalLM"],
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "n_routed_experts": 4,
        "moe_intermediate_size": 32,
    },
    "qwen3-next": {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "qwen3-sparse-step": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 8,
        "num_local_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    },
}


def _preset_cases() -> Iterator[tuple[str, Case]]:
    from checkpoint_tool.synth.presets import PRESETS
    from checkpoint_tool.synth.presets.base import PresetOptions

    for name, spec in PRESETS.items():
        for size in ("tiny", "full"):
            for fused in (False, True) if spec.supports_fused_experts else (False,):
                for with_names in (True, False):

                    def case(spec=spec, size=size, fused=fused, with_names=with_names):
                        lay = spec.build(getattr(spec, size), PresetOptions(fused_experts=fused))
                        shapes = {t.name: tuple(t.shape) for t in lay.tensors}
                        return lay.config, shapes if with_names else None

                    suffix = "-fused" if fused else ""
                    yield f"{name}/{size}{suffix}/{'names' if with_names else 'config'}", case


def _renamed(preset: str, renames: dict[str, str]) -> Case:
    """A tiny preset's config with its tensor names re-rooted (``old prefix -> new``)."""

    def case():
        from checkpoint_tool.synth.presets import PRESETS
        from checkpoint_tool.synth.presets.base import PresetOptions

        spec = PRESETS[preset]
        lay = spec.build(spec.tiny, PresetOptions())
        shapes = {}
        for t in lay.tensors:
            name = t.name
            for old, new in renames.items():
                if name.startswith(old):
                    name = new + name[len(old) :]
                    break
            shapes[name] = tuple(t.shape)
        return lay.config, shapes

    return case


def all_cases() -> dict[str, Case]:
    cases: dict[str, Case] = dict(_preset_cases())
    for name, cfg in HAND.items():
        cases[f"hand/{name}"] = lambda cfg=cfg: (cfg, None)
    cases["renamed/deepseek-v4-converted"] = _renamed(
        "deepseek-v4", {"layers.": "model.layers.", "mtp.": "model.mtp."}
    )
    cases["renamed/deepseek-v4-converted-keep-mtp"] = _renamed(
        "deepseek-v4", {"layers.": "model.layers."}
    )
    cases["renamed/qwen3.5-text-names"] = _renamed(
        "qwen3.5-moe-mxfp4", {"model.language_model.": "model."}
    )
    return cases


def _ranges(indices: list[int]) -> str:
    out: list[str] = []
    for i in indices:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def summary(f: ModelFacts) -> dict[str, Any]:
    """The readable part of a snapshot entry."""
    first = f.moe_layers[0] if f.moe_layers else None
    return {
        "family": f.family,
        "model_type": f.model_type,
        "hidden": f.hidden_size,
        "layers": f.num_hidden_layers,
        "mtp": f.num_mtp_layers,
        "expert_dtype": f.expert_dtype,
        "moe_layers": _ranges(f.moe_layer_indices),
        "mtp_prefixes": [m.prefix for m in f.moe_layers if m.is_mtp],
        "first": None
        if first is None
        else [
            first.prefix,
            first.n_routed,
            first.n_shared,
            first.moe_intermediate_size,
            first.shared_intermediate_size,
            first.top_k,
            first.has_shared_expert_gate,
            first.naming.routed_layout,
            first.naming.proj_names["gate"],
            first.naming.shared_name,
        ],
        "notes": len(f.notes),
    }


def snapshot_entry(case: Case) -> dict[str, Any]:
    config, shapes = case()
    f = model_facts(config, None if shapes is None else shapes.keys(), tensor_shapes=shapes)
    dump = json.dumps(f.model_dump(mode="json"), sort_keys=True)
    return {"summary": summary(f), "sha256": hashlib.sha256(dump.encode()).hexdigest()}


_CASES = all_cases()


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text())


def test_snapshot_covers_every_case(snapshot):
    assert sorted(snapshot) == sorted(_CASES)


@pytest.mark.parametrize("name", sorted(_CASES))
def test_facts_unchanged(name, snapshot):
    got = snapshot_entry(_CASES[name])
    assert got["summary"] == snapshot[name]["summary"]
    assert got["sha256"] == snapshot[name]["sha256"]


def _facts(preset: str) -> ModelFacts:
    config, shapes = _CASES[f"{preset}/tiny/names"]()
    assert shapes is not None
    return model_facts(config, shapes.keys(), tensor_shapes=shapes)


def test_hand_written_expectations_on_synth_presets():
    """A few fields spelled out, independent of the snapshot."""
    r1 = _facts("deepseek-v3-fp8")
    assert r1.family == "deepseek_v3" and r1.moe_layer_indices == [1, 2, 3, 4]
    assert r1.layer(4).is_mtp and r1.layer(4).prefix == "model.layers.4.mlp"
    m = r1.layer(1)
    assert m.n_shared == 1 and m.shared_intermediate_size == m.moe_intermediate_size

    v4 = _facts("deepseek-v4")
    assert v4.family == "deepseek_v4" and v4.expert_dtype == "fp4"
    assert v4.moe_layer_indices == list(range(v4.num_hidden_layers + 1))
    assert v4.moe_layers[-1].prefix == "mtp.0.ffn"
    assert v4.layer(0).routed_module(0, "up") == "layers.0.ffn.experts.0.w3"

    q35 = _facts("qwen3.5-moe-mxfp4")
    assert q35.family == "qwen3_moe" and q35.model_type == "qwen3_5_moe"
    m = q35.layer(0)
    assert m.prefix == "model.language_model.layers.0.mlp" and m.n_shared == 1
    assert m.has_shared_expert_gate and m.shared_prefix.endswith(".shared_expert")

    q3 = _facts("qwen3-moe")
    assert q3.family == "qwen3_moe" and all(m.n_shared == 0 for m in q3.moe_layers)


def test_every_family_of_the_table_is_pinned(snapshot):
    from checkpoint_tool.model.families import FAMILIES

    from .layouts import LAYOUTS

    # the order family_of tries them in, as before the table; later rows are added after
    assert list(FAMILIES)[:4] == ["deepseek_v4", "deepseek_v3", "qwen3_moe", "glm4_moe"]
    pinned = {entry["summary"]["family"] for entry in snapshot.values()}
    # families without a synth preset are pinned by a published layout of tests/model/layouts.py
    assert set(FAMILIES) <= pinned | set(LAYOUTS)


def test_families_claim_disjoint_model_types_and_architectures():
    from checkpoint_tool.model.families import FAMILIES

    specs = list(FAMILIES.values())
    for i, a in enumerate(specs):
        for b in specs[i + 1 :]:
            assert not a.model_types & b.model_types, (a.name, b.name)
            for prefix in a.architecture_prefixes:
                assert not prefix.startswith(b.architecture_prefixes), (a.name, b.name)
                assert not any(p.startswith(prefix) for p in b.architecture_prefixes)


ROW = """
glm4_moe:
  model_types: [glm4_moe]
  architecture_prefixes: [Glm4Moe]
  keys: {n_routed: n_routed_experts}
  moe_layers: {rule: first_k_dense, first_k: first_k_dense_replace}
  shared: {rule: count, count: n_shared_experts}
  layers: {roots: [model.layers], block: mlp}
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("rule: first_k_dense,", "rule: every_other,"), "every_other"),
        (("block: mlp}", "block: mlp}\n  naming: {shared_nam: x}"), "shared_nam"),
        (
            ("block: mlp}", "block: mlp}\n  naming_by_model_type: {glm4_moe: {fused_order: x}}"),
            "fused_order",
        ),
        (
            ("block: mlp}", "block: mlp}\n  mtp: {count: n, roots: {layers: [mtp]}}"),
            "every decoder root",
        ),
        (("glm4_moe:\n", "Llama-4:\n"), "Llama-4"),
    ],
)
def test_a_broken_table_is_one_line_input_error(tmp_path, edit, message):
    from checkpoint_tool.errors import InputError
    from checkpoint_tool.model.families.spec import load_families

    good = tmp_path / "good.yaml"
    good.write_text(ROW)
    assert load_families(good)["glm4_moe"].layers.block == "mlp"
    bad = tmp_path / "bad.yaml"
    bad.write_text(ROW.replace(*edit))
    with pytest.raises(InputError, match="not a valid family table") as info:
        load_families(bad)
    assert "\n" not in str(info.value)
    assert message in str(info.value)


if __name__ == "__main__":
    entries = {name: snapshot_entry(case) for name, case in sorted(_CASES.items())}
    lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in entries.items()]
    SNAPSHOT.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {len(entries)} cases to {SNAPSHOT}")

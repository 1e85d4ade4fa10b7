"""Detect how a checkpoint spells one MoE layer's expert projections, from its tensor names.

Families have a default spelling; real checkpoints vary (per-expert vs 3-D fused experts,
``gate_proj`` vs ``w1``, ``shared_experts`` vs Qwen's singular ``shared_expert``, and a shared
expert spelled unlike the routed ones: MiniMax-M3's ``experts.E.w1`` next to
``shared_experts.gate_proj``). With tensor
names at hand we look up a handful of candidate names per layer (set membership, no scan).

Example::

    names = {"model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj",
             "model.layers.1.mlp.shared_experts.gate_proj.weight", ...}
    detect_naming("model.layers.1.mlp", names, ExpertNaming())
    # ExpertNaming(routed_layout="fused_3d", shared_name="shared_experts", ...)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from checkpoint_tool.model.facts import HF_PROJ_NAMES, W_PROJ_NAMES, ExpertNaming

SHARED_NAMES = ("shared_experts", "shared_expert")
#: compressed-tensors' packed weight suffix
PACKED_WEIGHT = "weight_packed"
_SPELLINGS: tuple[dict[str, str], ...] = (HF_PROJ_NAMES, W_PROJ_NAMES)


def detect_naming(prefix: str, names: Collection[str], default: ExpertNaming) -> ExpertNaming:
    """Return the naming the tensors of layer ``prefix`` use, falling back to ``default``."""
    fields: dict[str, object] = {}
    routed = f"{prefix}.experts"
    for spelling in _SPELLINGS:
        if f"{routed}.0.{spelling['gate']}.weight" in names:
            fields.update(proj_names=dict(spelling), routed_layout="per_expert")
            break
        if f"{routed}.0.{spelling['gate']}.{PACKED_WEIGHT}" in names:  # compressed-tensors
            fields.update(
                proj_names=dict(spelling), routed_layout="per_expert", weight_suffix=PACKED_WEIGHT
            )
            break
    else:
        if f"{routed}.0.gate_up_proj.weight" in names:
            fields.update(routed_layout="per_expert_gate_up", gate_up_name="gate_up_proj")
        elif f"{routed}.gate_up_proj" in names or f"{routed}.gate_up_proj.weight" in names:
            fields.update(routed_layout="fused_3d", gate_up_name="gate_up_proj")
        elif f"{routed}.gate_up_proj_blocks" in names:  # gpt-oss MXFP4 (_blocks/_scales/_bias)
            fields.update(
                routed_layout="fused_3d", gate_up_name="gate_up_proj", fused_3d_weight="blocks"
            )
    first = fields.get("proj_names", default.proj_names)
    assert isinstance(first, dict)
    spellings = [first, *_SPELLINGS]
    for shared in SHARED_NAMES:
        base = f"{prefix}.{shared}"
        layout = _shared_layout(base, names, spellings)
        if layout is not None:
            fields.update(shared_name=shared, shared_layout=layout[0])
            spelled = layout[1]
            if spelled is not None and layout[0] == "single":
                spelled = _per_projection(base, names, spelled)
            if spelled is not None and "proj_names" not in fields and not default.shared_proj_names:
                fields["proj_names"] = dict(spelled)
            elif spelled is not None:
                ours = fields.get("proj_names", default.proj_names)
                fields["shared_proj_names"] = None if spelled == ours else dict(spelled)
            break
    return default.model_copy(update=fields) if fields else default


def has_weight(module: str, names: Collection[str]) -> bool:
    """``module`` stores a weight: ``.weight``, or compressed-tensors' ``.weight_packed``."""
    return f"{module}.weight" in names or f"{module}.{PACKED_WEIGHT}" in names


def _per_projection(base: str, names: Collection[str], spelled: dict[str, str]) -> dict[str, str]:
    """``spelled`` with each projection whose leaf is absent replaced by another spelling's
    that is there: vLLM's DeepSeek-V4 mapper renames only ``.shared_experts.w2`` to
    ``.shared_experts.down_proj`` (``models/deepseek_v4/amd/model.py``
    ``_make_deepseek_v4_weights_mapper``), leaving ``w1`` / ``w3``."""
    out = dict(spelled)
    for proj, leaf in spelled.items():
        if has_weight(f"{base}.{leaf}", names):
            continue
        for other in _SPELLINGS:
            if has_weight(f"{base}.{other[proj]}", names):
                out[proj] = other[proj]
                break
    return out


def _shared_layout(
    base: str, names: Collection[str], spellings: Iterable[dict[str, str]]
) -> tuple[str, dict[str, str] | None] | None:
    for spelling in spellings:
        if has_weight(f"{base}.{spelling['gate']}", names):
            return "single", spelling
        if has_weight(f"{base}.0.{spelling['gate']}", names):
            return "indexed", spelling
    if f"{base}.gate_up_proj.weight" in names:
        return "single_gate_up", None
    return None


def choose_root(candidates: list[str], names: Iterable[str] | None) -> str:
    """Pick the layer-list root (``model.layers``, ``model.language_model.layers``, ...)
    that the tensor names use; the first candidate when no name says otherwise."""
    if names is None:
        return candidates[0]
    dotted = [f"{c}." for c in candidates]
    seen: set[int] = set()
    for name in names:
        for i, d in enumerate(dotted):
            if i not in seen and name.startswith(d):
                seen.add(i)
        if 0 in seen:
            return candidates[0]
    for i, c in enumerate(candidates):
        if i in seen:
            return c
    return candidates[0]

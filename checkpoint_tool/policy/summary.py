"""Fold per-layer decisions into the summary, in the reference engine's words.

``fused shared experts: enabled on MoE layer(s) [1, 2, 4]; disabled on MoE layer(s) [3]``,
then each distinct skip reason once with its layers (reasons are grouped by their template,
the reason with the layer index written ``N``).

Example::

    summarize(layers, issues).reasons
    # {"Quark excludes shared experts at model.layers.N.mlp.shared_experts": [3],
    #  "Quark uses different quantization configurations ... at model.layers.N...": [4]}
"""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint_tool.policy.decision import TpGeometry
from checkpoint_tool.policy.report import MoeLayerPolicy, PolicySummary
from checkpoint_tool.report import Issue


def fse_sentence(enabled: list[int], disabled: list[int]) -> str:
    """The reference engine's one-line summary of a model's FSE state."""
    parts = []
    if enabled:
        parts.append(f"enabled on MoE layer(s) {enabled}")
    if disabled:
        parts.append(f"disabled on MoE layer(s) {disabled}")
    if not parts:
        return "fused shared experts: not applicable (no MoE layer has shared experts)"
    return "fused shared experts: " + "; ".join(parts)


def summarize(layers: Iterable[MoeLayerPolicy], issues: Iterable[Issue]) -> PolicySummary:
    """The summary block of a ``PolicyReport``."""
    enabled, disabled, na, padded = [], [], [], []
    reasons: dict[str, list[int]] = {}
    for m in layers:
        if m.fse.code == "no_shared_experts":
            na.append(m.layer)
        elif m.fse.enabled:
            enabled.append(m.layer)
        else:
            disabled.append(m.layer)
            reasons.setdefault(m.fse.reason_template or m.fse.code, []).append(m.layer)
        if not m.intermediate.aligned or (
            m.shared_intermediate is not None and not m.shared_intermediate.aligned
        ):
            padded.append(m.layer)
    issues = list(issues)
    return PolicySummary(
        fse_enabled_layers=enabled,
        fse_disabled_layers=disabled,
        fse_not_applicable_layers=na,
        reasons=reasons,
        padded_layers=padded,
        text=fse_sentence(enabled, disabled),
        errors=sum(1 for i in issues if i.severity == "error"),
        warnings=sum(1 for i in issues if i.severity == "warning"),
    )


def _geometry_line(what: str, g: TpGeometry) -> str:
    if not g.divisible:
        split = f"{g.size} does not divide by tp {g.tp}"
    else:
        split = f"{g.size} / tp {g.tp} = {g.per_rank} is not a multiple of {g.alignment}"
    return (
        f"{what} intermediate {split} ({g.alignment_from}); vLLM cannot split it as is: "
        f"pad to {g.pad_to} ({g.padded_per_rank} per rank), as `ckpt convert --tp {g.tp}` does"
    )


def padding_issues(layers: Iterable[MoeLayerPolicy]) -> list[Issue]:
    """One warning per distinct misaligned geometry, listing the layers it applies to."""
    groups: dict[str, list[int]] = {}
    for m in layers:
        if not m.intermediate.aligned:
            groups.setdefault(_geometry_line("routed", m.intermediate), []).append(m.layer)
        g = m.shared_intermediate
        if g is not None and not g.aligned:
            groups.setdefault(_geometry_line("shared", g), []).append(m.layer)
    return [
        Issue(
            severity="warning",
            rule="tp_alignment",
            message=f"MoE layer(s) {layers}: {line}",
        )
        for line, layers in groups.items()
    ]

"""Policy drift: ``--expect-policy policy.json`` fails on any changed per-layer decision.

``policy.json`` is an earlier ``ckpt inspect --format json`` of the checkpoint (a
``checkpoint_tool.policy.PolicyReport``). The policy is rebuilt from the checkpoint with the
same options the expected report records (tp, ep, eplb, all2all, fse mode) and compared layer
by layer on the *decisions*: schemes, layouts, expert counts and widths, FSE on/off with its
code and slots, TP geometry and padding. Wording (rule and reason texts) is not compared.

Example finding::

    Issue(severity="error", rule="policy_drift", tensor="model.layers.3.mlp",
          message="MoE layer 3: fse.enabled was true, now false (fse.code: ok -> "
                  "quark_different_configs)")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import UsageError
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext
from checkpoint_tool.validate.decisions import decisions
from checkpoint_tool.validate.requant_drift import split_requantized

if TYPE_CHECKING:
    from checkpoint_tool.policy.report import PolicyReport

def load_expected_policy(path: Path) -> PolicyReport:
    """Parse ``policy.json`` as a ``PolicyReport``; ``UsageError`` (exit 2) if it is not one."""
    from pydantic import ValidationError

    from checkpoint_tool.policy.report import PolicyReport

    try:
        return PolicyReport.model_validate_json(Path(path).read_bytes())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the expected policy ({exc.strerror})") from exc
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(
            f"{path}: not a `ckpt inspect --format json` policy report ({first}); "
            "regenerate it with ckpt inspect"
        ) from exc


def compare_policies(expected: PolicyReport, actual: PolicyReport) -> list[Issue]:
    """Findings for each layer added, removed or decided differently."""
    out: list[Issue] = []
    exp_layers = {m.layer: m for m in expected.moe_layers}
    act_layers = {m.layer: m for m in actual.moe_layers}
    for idx in sorted(set(exp_layers) | set(act_layers)):
        e, a = exp_layers.get(idx), act_layers.get(idx)
        if a is None or e is None:
            present = e if e is not None else a
            assert present is not None
            what = "is no longer a MoE layer" if a is None else "is a new MoE layer"
            out.append(_issue(present.prefix, f"MoE layer {idx} {what} (expected policy differs)"))
            continue
        de, da = decisions(e), decisions(a)
        changes = [
            f"{k}: {_show(de.get(k))} -> {_show(da.get(k))}"
            for k in sorted(set(de) | set(da))
            if de.get(k) != da.get(k)
        ]
        if changes:
            shown = "; ".join(changes[:6]) + (
                f"; +{len(changes) - 6} more" if len(changes) > 6 else ""
            )
            out.append(_issue(a.prefix, f"MoE layer {idx} changed: {shown}"))
    return out


def _show(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _issue(prefix: str, message: str) -> Issue:
    return Issue(severity="error", rule="policy_drift", tensor=prefix, message=message)


def check_policy_drift(ctx: ValidationContext) -> list[Issue]:
    """With --expect-policy: every per-layer policy decision is unchanged."""
    if ctx.options.expect_policy is None:
        raise Unavailable("no --expect-policy given")
    try:
        from checkpoint_tool.policy import build_policy
    except ImportError as exc:
        raise Unavailable(f"the policy builder is not available ({exc})") from None
    expected = load_expected_policy(ctx.options.expect_policy)
    actual = build_policy(
        ctx.catalog,
        tp=expected.tp,
        ep=expected.ep,
        eplb=expected.eplb,
        all2all=expected.all2all,
        fse=expected.fse_mode,
        resolved=ctx.resolved(),
        target=expected.target,
    )
    expected, actual, requantized = split_requantized(expected, actual, ctx.config)
    return [*requantized, *compare_policies(expected, actual)]

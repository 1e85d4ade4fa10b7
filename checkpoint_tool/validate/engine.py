"""The engine verdict in ``ckpt validate``: does the target engine load this checkpoint?

The same engine model as ``ckpt inspect --target`` (the policy decision +
``build_engine_report``), so a
checkpoint that inspect says the target refuses fails validate too: a CI gate. The target is
``--target``, else the one ``ckpt convert`` recorded in config.json (``ckpt.target``), else
the default (the newest stock vLLM on CUDA); the TP size is ``ckpt.tp`` (1 for checkpoints
ckpt did not write).

Example::

    check_engine_loads(ctx)
    # [Issue(severity="error", rule="engine_loads", message="vllm-0.33 refuses: [fse_slots_unfused] ...")]
"""

from __future__ import annotations

from checkpoint_tool.errors import CkptError
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext

#: engine rules whose facts other validate rules already report (one root cause, one finding)
REPORTED_ELSEWHERE = {
    "checkpoint_incomplete": "experts_present / tensors_explained",
    "name_pattern_unmatched": "quant_config",
}


def engine_target(ctx: ValidationContext) -> tuple[str | None, int]:
    """(target name or None for the default, TP size) the verdict is for."""
    meta = (ctx.config or {}).get("ckpt")
    meta = meta if isinstance(meta, dict) else {}
    target = ctx.options.target or meta.get("target")
    recorded = meta.get("tp")
    tp = recorded if isinstance(recorded, int) and recorded > 0 else 1
    return (target if isinstance(target, str) else None), tp


def _structure_errors(ctx: ValidationContext) -> list[str]:
    """Structure rules with errors: the engine verdict means nothing on broken files."""
    from checkpoint_tool.validate import structure

    out = []
    for fn in (
        structure.check_shard_missing,
        structure.check_shard_truncated,
        structure.check_header_valid,
        structure.check_offsets_in_range,
    ):
        try:
            found = fn(ctx)
        except Unavailable:
            continue
        if any(i.severity == "error" for i in found):
            out.append(fn.__name__.removeprefix("check_"))
    return out


def check_engine_loads(ctx: ValidationContext) -> list[Issue]:
    """The target engine loads the checkpoint (the engine verdict of ckpt inspect --target)."""
    if ctx.is_sharded_state:
        raise Unavailable("a vllm-sharded output: its engine keys are checked by ckpt verify")
    broken = _structure_errors(ctx)
    if broken:
        raise Unavailable(f"the files are broken first ({', '.join(broken)}; see those rules)")
    resolved = ctx.resolved()
    from checkpoint_tool.policy import decide_policy
    from checkpoint_tool.policy.engine.build import build_engine_report

    target, tp = engine_target(ctx)
    catalog = ctx.catalog
    try:
        decision = decide_policy(catalog, tp=tp, resolved=resolved, target=target)
        report = build_engine_report(catalog, decision, target, tp)
    except CkptError as exc:
        raise Unavailable(f"the engine verdict cannot be built: {exc.message}") from None
    out: list[Issue] = []
    for f in report.findings:
        if f.severity == "info" or f.rule in REPORTED_ELSEWHERE:
            continue
        out.append(
            Issue(
                severity=f.severity,
                rule="engine_loads",
                tensor=f.tensors[0] if f.tensors else (f.modules[0] if f.modules else None),
                message=f"{report.target} (tp {tp}): [{f.rule}] {f.message}"
                + (f' (engine: "{f.upstream}")' if f.upstream else ""),
            )
        )
    return out

"""Run every rule over a checkpoint and build the report.

Example::

    report = validate_checkpoint(Path("out/"), ValidateOptions(strict=True))
    report.exit_code            # 0 clean, 1 findings
    [i.line() for i in report.findings()]
    # ['error [scale_values] model-00001-of-00002.safetensors: model.layers.1...: ...']
"""

from __future__ import annotations

import os
from pathlib import Path

from checkpoint_tool.errors import CkptError, UsageError
from checkpoint_tool.report import Issue
from checkpoint_tool.validate.checks import CHECKS, Check
from checkpoint_tool.validate.context import (
    Unavailable,
    ValidateOptions,
    ValidationContext,
    load_context,
)
from checkpoint_tool.validate.report import (
    CheckResult,
    CheckStatus,
    ValidateReport,
    build_report,
    check_status,
)


def run_check(check: Check, ctx: ValidationContext) -> CheckResult:
    """Apply one rule; a rule that cannot apply is skipped, a crash becomes an error finding."""
    try:
        findings = list(check.fn(ctx))
    except Unavailable as exc:
        return CheckResult(
            id=check.id,
            category=check.category,
            title=check.title,
            status=CheckStatus.skipped,
            skipped_reason=str(exc),
        )
    except CkptError as exc:
        findings = [Issue(severity="error", rule=check.id, message=exc.message)]
    except Exception as exc:  # a bug must fail the gate visibly, not pass it silently
        findings = [
            Issue(
                severity="error",
                rule=check.id,
                message=f"internal error while checking ({type(exc).__name__}: {exc}); "
                "please report it with this line",
            )
        ]
    findings.sort(key=lambda f: (f.severity != "error", f.file or "", f.tensor or "", f.rule))
    return CheckResult(
        id=check.id,
        category=check.category,
        title=check.title,
        status=check_status(findings, strict=ctx.options.strict),
        findings=findings,
    )


def check_options(path: Path, options: ValidateOptions) -> None:
    """Refuse option combinations and option files that cannot work (``UsageError``, exit 2)."""
    if options.manifest is not None and not Path(options.manifest).is_file():
        raise UsageError(f"--manifest {options.manifest}: no such file")
    if options.manifest is not None and options.write_manifest:
        raise UsageError("--manifest checks a manifest, --write-manifest writes one: pick one")
    if options.write_manifest and path.is_file():
        raise UsageError("--write-manifest needs a checkpoint folder, not a single file")
    if options.expect_policy is not None:
        from checkpoint_tool.validate.drift import load_expected_policy

        load_expected_policy(Path(options.expect_policy))  # UsageError if unreadable


def validate_checkpoint(
    path: str | os.PathLike[str],
    options: ValidateOptions | None = None,
    *,
    only: list[str] | None = None,
) -> ValidateReport:
    """Validate the checkpoint at ``path`` (folder, one ``.safetensors`` file, or hub repo id).

    ``only`` restricts the run to the named rule ids (others are reported skipped).
    Raises ``InputError`` (exit 2) only when ``path`` is not a checkpoint at all.
    """
    options = options or ValidateOptions()
    check_options(Path(path), options)
    ctx = load_context(path, options)
    results = []
    for check in CHECKS:
        if only is not None and check.id not in only:
            results.append(
                CheckResult(
                    id=check.id,
                    category=check.category,
                    title=check.title,
                    status=CheckStatus.skipped,
                    skipped_reason="not selected (--only)",
                )
            )
            continue
        results.append(run_check(check, ctx))
    written = None
    if options.write_manifest:
        from checkpoint_tool.validate.checksums import write_manifest_if_clean

        written, result = write_manifest_if_clean(ctx, results)
        results.append(result)
    return build_report(
        str(path),
        results,
        files=len(ctx.counted_files),
        tensors=len(ctx.all_names),
        strict=options.strict,
        manifest_written=written,
    )

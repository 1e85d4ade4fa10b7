"""``ckpt validate PATH``: the pre-publish gate for CI (no source checkpoint needed).

Exit codes: 0 clean (warnings allowed unless ``--strict``), 1 findings, 2 usage error or
input that is not a checkpoint. See docs/validate.md for the rules and a CI workflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from checkpoint_tool.cli.options import ReportFormatOpt, SourceArg, TargetOpt
from checkpoint_tool.cli.output import emit
from checkpoint_tool.cli.session import paused_gc
from checkpoint_tool.errors import CkptError, UsageError

if TYPE_CHECKING:
    from checkpoint_tool.policy.report import PolicyReport
    from checkpoint_tool.validate.report import ValidateReport

HELP = """Check a checkpoint before publishing it: structure (index, shards, headers, offsets,
total_size), completeness against config.json, per-scheme dtypes and scale shapes, scale
values, checksums against ckpt-manifest.json, policy drift, and optionally a runtime run.

Exit code: 0 clean, 1 findings (errors; warnings too with --strict), 2 usage error or
unreadable input.

Examples:

  ckpt validate /out/model

  ckpt validate /out/model --strict --scan-weights --format junit > validate.xml

  ckpt validate /out/model --expect-policy policy.json --junit validate.xml

  ckpt validate /out/model --write-manifest

  ckpt validate /out/model --expect-policy policy.json --format html > validate.html

  ckpt validate /out/model --format junit --html validate.html > validate.xml
  ckpt validate /out/model --target vllm-0.33-rocm-aiter-fse   # the engine it is for
"""


def register(app: typer.Typer) -> None:
    @app.command("validate", help=HELP)
    def validate(
        path: SourceArg,
        fmt: ReportFormatOpt = "human",
        strict: Annotated[
            bool, typer.Option("--strict", help="Fail (exit 1) on warnings as well.")
        ] = False,
        scan_weights: Annotated[
            bool,
            typer.Option(
                "--scan-weights",
                help="Also read every weight (streamed) for FP8 NaN codes and float NaN/inf.",
            ),
        ] = False,
        manifest: Annotated[
            Path | None,
            typer.Option(help="Manifest to check against (default: PATH/ckpt-manifest.json)."),
        ] = None,
        write_manifest: Annotated[
            bool,
            typer.Option(
                "--write-manifest",
                help="Write PATH/ckpt-manifest.json (sizes + sha256) if every check passes.",
            ),
        ] = False,
        expect_policy: Annotated[
            Path | None,
            typer.Option(
                help="Earlier `ckpt inspect --format json` output; fail on any changed "
                "per-layer decision."
            ),
        ] = None,
        deep: Annotated[
            bool,
            typer.Option(
                "--deep", help="Run the MoE runtime on sampled layers (outputs finite, sane)."
            ),
        ] = False,
        deep_layers: Annotated[
            int, typer.Option(help="--deep: how many MoE layers to run (spread over the model).")
        ] = 2,
        deep_tokens: Annotated[
            int, typer.Option(help="--deep: seeded random tokens per layer.")
        ] = 16,
        only: Annotated[
            list[str] | None,
            typer.Option(
                "--only", help="Run only these rule ids (repeatable), e.g. --only scale_values."
            ),
        ] = None,
        junit: Annotated[
            Path | None,
            typer.Option(help="Also write the JUnit XML report to this file."),
        ] = None,
        html_file: Annotated[
            Path | None,
            typer.Option(
                "--html", help="Also write the HTML report (with the layer map) to this file."
            ),
        ] = None,
        target: TargetOpt = None,
    ) -> None:
        from checkpoint_tool.validate import ValidateOptions, validate_checkpoint
        from checkpoint_tool.validate.checks import CHECK_IDS
        from checkpoint_tool.validate.render import render_human, render_junit, render_markdown

        if only:
            unknown = sorted(set(only) - set(CHECK_IDS))
            if unknown:
                raise UsageError(
                    f"--only: unknown rule id(s) {', '.join(unknown)}; known: "
                    f"{', '.join(CHECK_IDS)}"
                )
        if deep_layers < 1 or deep_tokens < 1:
            raise UsageError("--deep-layers and --deep-tokens must be 1 or more")
        options = ValidateOptions(
            scan_weights=scan_weights,
            manifest=manifest,
            write_manifest=write_manifest,
            expect_policy=expect_policy,
            deep=deep,
            deep_layers=deep_layers,
            deep_tokens=deep_tokens,
            strict=strict,
            target=target,
        )
        with paused_gc():  # the catalog, its policy and findings: collected once, afterwards
            report = validate_checkpoint(path, options, only=list(only) if only else None)
        if junit is not None:
            try:
                junit.write_text(render_junit(report), encoding="utf-8")
            except OSError as exc:
                raise UsageError(
                    f"{junit}: cannot write the JUnit report ({exc.strerror})"
                ) from exc
        page: list[str] = []  # the HTML page, drawn once for --html and --format html

        def html(r: ValidateReport) -> str:
            if not page:
                page.append(_render_html(r, path, expect_policy, target))
            return page[0]

        if html_file is not None:
            _write_page(html_file, html(report))
        emit(
            report,
            fmt,
            human=render_human,
            markdown=render_markdown,
            junit=render_junit,
            html=html,
        )
        if report.exit_code:
            raise typer.Exit(report.exit_code)


def _write_page(dst: Path, text: str) -> None:
    """Write ``text`` to ``dst`` through a temporary name (never a half page under ``dst``)."""
    import os

    tmp = dst.with_name(f".{dst.name}.partial")
    try:
        tmp.write_bytes(text.encode("utf-8"))
        os.replace(tmp, dst)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{dst}: cannot write the HTML report ({exc.strerror})") from exc


def _render_html(
    report: ValidateReport, path: str, expect_policy: Path | None, target: str | None
) -> str:
    """``--format html``: the report, plus the layer map of the checkpoint's policy
    (built as ``ckpt inspect`` does, with the options of ``--expect-policy`` when given)."""
    from checkpoint_tool.html.validate_page import render_validate_html

    policy: PolicyReport | None = None
    note = None
    try:
        policy = _policy_for_map(path, expect_policy, target)
    except CkptError as exc:
        note = f"no layer map: the policy could not be built ({exc.message})"
    if policy is not None and not policy.moe_layers:
        policy, note = None, "no layer map: the checkpoint has no MoE layers"
    return render_validate_html(report, policy, note)


def _policy_for_map(path: str, expect_policy: Path | None, target: str | None) -> PolicyReport:
    """The policy drawn on the map: for the engine and TP the ``engine_loads`` verdict judges
    (``--target``, else config.json's ``ckpt.target`` / ``ckpt.tp``), or ``--expect-policy``'s."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.forked import spread_map
    from checkpoint_tool.policy import decide_policy
    from checkpoint_tool.policy.build import render_policy
    from checkpoint_tool.policy.engine.build import build_engine_report
    from checkpoint_tool.policy.report import with_engine
    from checkpoint_tool.validate.drift import load_expected_policy

    catalog = open_catalog(path, headers_only=True)
    meta = (catalog.config or {}).get("ckpt") if isinstance(catalog.config, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    tp = meta.get("tp") if isinstance(meta.get("tp"), int) and meta["tp"] > 0 else 1
    recorded = meta.get("target") if isinstance(meta.get("target"), str) else None
    opts = {"tp": tp, "ep": False, "eplb": False, "all2all": None, "fse": "auto"}
    target = target or recorded
    if expect_policy is not None:
        e = load_expected_policy(expect_policy)
        opts = {"tp": e.tp, "ep": e.ep, "eplb": e.eplb, "all2all": e.all2all, "fse": e.fse_mode}
        target = e.target or target  # as the drift rule rebuilds it
    decision = decide_policy(catalog, **opts, target=target)
    report = render_policy(decision, catalog, spread=spread_map)
    engine = build_engine_report(
        catalog, decision, target, opts["tp"], None, opts["ep"], opts["eplb"], opts["all2all"]
    )
    return with_engine(report, engine)

"""``ckpt validate --format html``: the gate's verdict, findings, layer map and checks, one page.

Drawn from the ``ValidateReport`` (the JSON of ``--format json``) and, where the checkpoint
has MoE layers, the ``PolicyReport`` of the checkpoint (what ``ckpt inspect`` reports, with
the options of ``--expect-policy`` when given). The map gets one more row, ``validate``: the
gate's findings on each layer (by tensor name).

Example::

    html = render_validate_html(report, policy)           # policy may be None
    # '<!DOCTYPE html>...<h1>ckpt validate: <code>out</code></h1>...FAILED: 1 error(s)...'
"""

from __future__ import annotations

from checkpoint_tool.html.cells import findings_row
from checkpoint_tool.html.page import cell, esc, page, rows_html, section, verdict
from checkpoint_tool.html.panels import issues_table
from checkpoint_tool.html.policy_page import model_line, policy_sections
from checkpoint_tool.policy.report import PolicyReport
from checkpoint_tool.validate.render import summary_line
from checkpoint_tool.validate.report import ValidateReport


def checks_table(report: ValidateReport) -> str:
    """One row per rule: category, id, status (coloured), error and warning counts, note."""
    rows = rows_html(
        [
            cell(c.category),
            cell(c.id, "mono rule"),
            cell(c.status.value, f"st-{c.status.value}"),
            cell(c.errors or ""),
            cell(c.warnings or ""),
            cell(c.skipped_reason or c.title),
        ]
        for c in report.checks
    )
    head = "".join(
        f"<th>{h}</th>" for h in ("category", "check", "status", "errors", "warnings", "note")
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def render_validate_html(
    report: ValidateReport, policy: PolicyReport | None = None, policy_note: str | None = None
) -> str:
    """The whole page; ``policy_note`` says why there is no map when ``policy`` is None."""
    s = report.summary
    findings = report.findings()
    parts = [
        f"<h1>ckpt validate: <code>{esc(report.path)}</code></h1>",
        f'<p class="meta">{esc(model_line(policy))}</p>' if policy is not None else "",
        verdict(
            summary_line(report),
            [
                "strict: warnings fail the gate" if report.strict else "",
                f"manifest written: {report.manifest_written}" if report.manifest_written else "",
            ],
            bad=report.exit_code != 0,
        ),
        section(
            f"Validate findings ({s.errors} error(s), {s.warnings} warning(s))",
            issues_table(findings),
        ),
    ]
    if policy is not None:
        row = findings_row(policy, "validate", "validate", findings)
        parts += policy_sections(
            policy, extra_rows=[row], extra_findings={"validate findings": findings}
        )
    elif policy_note:
        parts.append(section("Layer map", f"<p>{esc(policy_note)}</p>", anchor="map"))
    parts.append(section(f"Checks ({s.checks})", checks_table(report)))
    return page(
        f"ckpt validate {report.path}",
        parts,
        footer="ckpt validate --format html · exit code "
        f"{report.exit_code} · {len(findings)} finding(s)",
    )

"""Render a ``ValidateReport``: rich summary (human), Markdown (PR comments), JUnit XML (CI).

JUnit: one ``<testcase>`` per rule (``classname="ckpt.validate.<category>"``, ``name=<rule id>``);
a failing rule carries one ``<failure>`` whose text has one finding per line
(``error [rule] file: tensor: message``); warnings go to ``<system-out>`` (and fail the case
under ``--strict``); skipped rules carry ``<skipped message=reason/>``. No timestamps or host
names, so the XML is byte-identical for the same checkpoint.

Example::

    <testcase classname="ckpt.validate.scales" name="scale_values">
      <failure type="error" message="1 error: model-00001...: ...weight_scale: 2 of 64 E8M0 ...">
    error [scale_values] model-00001-of-00002.safetensors: ...weight_scale: 2 of 64 E8M0 ...
      </failure>
    </testcase>
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rich.console import Console
from rich.table import Table

from checkpoint_tool.validate.report import CheckStatus, ValidateReport

STATUS_STYLE = {
    CheckStatus.passed: "green",
    CheckStatus.failed: "bold red",
    CheckStatus.warned: "yellow",
    CheckStatus.skipped: "dim",
}


def summary_line(report: ValidateReport) -> str:
    s = report.summary
    verdict = "FAILED" if report.exit_code else "PASSED"
    return (
        f"{verdict}: {s.errors} error(s), {s.warnings} warning(s); {s.passed} passed, "
        f"{s.failed} failed, {s.warned} warned, {s.skipped} skipped of {s.checks} checks "
        f"({s.files} files, {s.tensors} tensors)"
    )


def render_human(report: ValidateReport, console: Console) -> None:
    """A table of checks, then every finding on its own line, then the verdict."""
    table = Table(title=f"ckpt validate {report.path}", title_justify="left")
    table.add_column("category")
    table.add_column("check")
    table.add_column("status")
    table.add_column("errors", justify="right")
    table.add_column("warnings", justify="right")
    table.add_column("note", overflow="fold")
    for c in report.checks:
        style = STATUS_STYLE[c.status]
        table.add_row(
            c.category,
            c.id,
            f"[{style}]{c.status.value}[/]",
            str(c.errors or ""),
            str(c.warnings or ""),
            c.skipped_reason or c.title,
        )
    console.print(table)
    findings = report.findings()
    if findings:
        console.print(f"[bold]{len(findings)} finding(s):[/]")
        for f in findings:
            style = "red" if f.severity == "error" else "yellow"
            console.print(f.line(), style=style, markup=False, highlight=False, soft_wrap=True)
    if report.manifest_written:
        console.print(f"manifest written: {report.manifest_written}")
    style = "bold red" if report.exit_code else "bold green"
    console.print(summary_line(report), style=style, markup=False, highlight=False)


def render_markdown(report: ValidateReport) -> str:
    """A Markdown summary (for PR comments / job summaries): checks table, then findings."""
    lines = [
        f"### ckpt validate `{report.path}`",
        "",
        f"**{summary_line(report)}**",
        "",
        "| category | check | status | errors | warnings | note |",
        "|---|---|---|---:|---:|---|",
    ]
    for c in report.checks:
        note = (c.skipped_reason or c.title).replace("|", "\\|")
        lines.append(
            f"| {c.category} | `{c.id}` | {c.status.value} | {c.errors or ''} | "
            f"{c.warnings or ''} | {note} |"
        )
    findings = report.findings()
    if findings:
        lines += ["", "```", *[f.line() for f in findings], "```"]
    return "\n".join(lines) + "\n"


def render_junit(report: ValidateReport) -> str:
    """JUnit XML: one testcase per rule; failures list their findings one per line."""
    failures = sum(1 for c in report.checks if c.status is CheckStatus.failed)
    skipped = sum(1 for c in report.checks if c.status is CheckStatus.skipped)
    counts = {
        "tests": str(len(report.checks)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
    }
    root = ET.Element("testsuites", {"name": "ckpt validate", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": f"ckpt validate {report.path}", **counts})
    for c in report.checks:
        case = ET.SubElement(
            suite, "testcase", {"classname": f"ckpt.validate.{c.category}", "name": c.id}
        )
        if c.status is CheckStatus.skipped:
            ET.SubElement(case, "skipped", {"message": c.skipped_reason or "skipped"})
            continue
        failing = [f for f in c.findings if f.severity == "error" or report.strict]
        others = [f for f in c.findings if f not in failing]
        if failing:
            head = f"{len(failing)} finding(s); first: {failing[0].line()}"
            fail = ET.SubElement(case, "failure", {"type": failing[0].severity, "message": head})
            fail.text = "\n".join(f.line() for f in failing)
        if others:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(f.line() for f in others)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"

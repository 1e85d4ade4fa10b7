"""The HTML document shell shared by every HTML report: escaping, inline CSS, sections.

One self-contained file: inline CSS and SVG, no scripts, no fonts or images fetched, no
timestamps or host names (same report -> same bytes). Every piece of report text goes through
``esc`` (tensor names and config patterns are user data).

Example::

    page("ckpt inspect ./src", [section("Findings", table(["rule"], [["tp_alignment"]]))],
         footer="ckpt inspect --format html")
    # '<!DOCTYPE html>\\n<html lang="en">...<h2>Findings</h2><table>...'
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

#: colours by severity / status, shared by the map, the tables and the legend
SEVERITY_FILL = {"error": "#d64541", "warning": "#f0b429", "info": "#9ec5e8", "ok": "#cfe8d5"}

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, "DejaVu Sans", "Liberation Sans", Arial, sans-serif;
       margin: 24px; color: #1d2330; background: #fff; max-width: 1600px; }
h1 { font-size: 20px; margin: 0 0 4px; word-break: break-all; }
h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid #dde2ea; padding-bottom: 3px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
code, .mono, td.mono { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace;
       font-size: 12px; }
.meta { color: #4a5568; margin: 0 0 10px; }
.verdict { padding: 8px 12px; border-radius: 4px; margin: 10px 0; font-weight: 600; }
.verdict.bad { background: #fbe3e2; border-left: 5px solid #d64541; }
.verdict.good { background: #e2f3e7; border-left: 5px solid #2e9d4f; }
.verdict .sub { font-weight: 400; display: block; margin-top: 2px; }
.scroll { overflow-x: auto; border: 1px solid #dde2ea; border-radius: 4px; padding: 6px; }
svg.map { display: block; }
svg.map text { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 11px;
       dominant-baseline: central; pointer-events: none; }
svg.map.narrow text { font-size: 9.5px; }
svg.map text.row { font-size: 12px; }
svg.map a:hover rect.cell { stroke: #1d2330; stroke-width: 1.5; }
svg.map rect.cell { stroke: #ffffff; stroke-width: 1; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 8px 0; font-size: 12px; }
.legend span.sw { display: inline-block; width: 14px; height: 14px; vertical-align: -2px;
       margin-right: 5px; border: 1px solid #9aa3b2; border-radius: 2px; }
table { border-collapse: collapse; margin: 4px 0 10px; font-size: 13px; }
th, td { border: 1px solid #dde2ea; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; }
td { overflow-wrap: anywhere; }
td.rule { overflow-wrap: normal; white-space: nowrap; }
td.sev-error { background: #fbe3e2; }
td.sev-warning { background: #fdf1d3; }
td.sev-info { background: #e6f0fa; }
td.st-passed { background: #e2f3e7; } td.st-failed { background: #fbe3e2; }
td.st-warned { background: #fdf1d3; } td.st-skipped { color: #6b7280; }
.panel { display: none; border: 2px solid #4e79a7; border-radius: 4px; padding: 4px 12px 8px;
       margin: 10px 0; }
.panel:target { display: block; }
.hint { color: #6b7280; font-size: 12px; }
details > summary { cursor: pointer; }
footer { color: #6b7280; font-size: 12px; margin-top: 24px; }
"""


def esc(value: object) -> str:
    """HTML-escape any value for text and attribute positions (quotes included)."""
    return html.escape(str(value), quote=True)


def table(head: Sequence[str], rows: Iterable[Sequence[str]], *, raw: bool = False) -> str:
    """A plain table; cells are escaped unless ``raw`` (then they are trusted HTML)."""
    out = ["<table><thead><tr>"]
    out += [f"<th>{esc(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def cell(text: object, cls: str = "") -> str:
    """A ``<td>`` with escaped text and an optional class (for ``table(..., raw=True)``)."""
    return f'<td class="{esc(cls)}">{esc(text)}</td>' if cls else f"<td>{esc(text)}</td>"


def rows_html(rows: Iterable[Sequence[str]]) -> str:
    """Table body rows whose cells are already ``cell(...)`` strings."""
    return "".join("<tr>" + "".join(r) + "</tr>" for r in rows)


def section(title: str, body: str, *, anchor: str | None = None) -> str:
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{ident}><h2>{esc(title)}</h2>\n{body}\n</section>"


def verdict(text: str, sub: Sequence[str], *, bad: bool) -> str:
    """The coloured banner under the title: the report's summary sentence and its counts."""
    subs = "".join(f'<span class="sub">{esc(s)}</span>' for s in sub if s)
    return f'<div class="verdict {"bad" if bad else "good"}">{esc(text)}{subs}</div>'


def page(title: str, parts: Sequence[str], *, footer: str) -> str:
    """The whole document (UTF-8, final newline)."""
    body = "\n".join(p for p in parts if p)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n"
        f"{body}\n<footer>{esc(footer)}</footer>\n</body>\n</html>\n"
    )

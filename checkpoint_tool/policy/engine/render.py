"""The ``engine`` section of ``ckpt inspect``: JSON field, human lines, Markdown list.

The section is the ``engine`` field of the ``PolicyReport`` (``policy.report.with_engine``).
Human output appends one line per finding after the policy; Markdown a section.

Example (human)::

    engine vllm-0.33: will refuse to load or crash (1 error(s), 0 warning(s))
      error [fse_mixed_all_or_nothing] FSE is possible on MoE layer(s) [3, 4] but not ...
            engine says: "Fused shared experts must be enabled for all MoE layers"
            mirrors vllm/model_executor/models/deepseek_v2.py
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import EngineReport

if TYPE_CHECKING:  # rich is imported by the human renderer only (json output never needs it)
    from rich.console import Console

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_engine_human(engine: EngineReport | None, console: Console) -> None:
    if engine is None:
        return
    from rich.markup import escape

    style = (
        "bold red" if engine.summary.errors else "yellow" if engine.summary.warnings else "green"
    )
    console.print(f"\n[{style}]engine {escape(engine.summary.text)}[/]")
    for f in engine.findings:
        tag = escape(f"[{f.rule}]")
        console.print(f"  [{_STYLE[f.severity]}]{f.severity}[/] {tag} {escape(f.message)}")
        if f.upstream:
            console.print(f'        engine says: "{escape(f.upstream)}"')
        more = (
            f" (+{f.modules_total - len(f.modules)} more)"
            if f.modules_total > len(f.modules)
            else ""
        )
        if f.modules and not f.layers:
            console.print(f"        modules: {escape(', '.join(f.modules[:5]))}{more}")
        console.print(f"        mirrors {f.source}", style="dim")


def render_engine_markdown(engine: EngineReport | None) -> str:
    if engine is None:
        return ""
    lines = [f"\n### Engine: {engine.target}\n", f"**{engine.summary.text}**\n"]
    for f in engine.findings:
        up = f' — engine: "{f.upstream}"' if f.upstream else ""
        lines.append(f"- **{f.severity}** `{f.rule}`: {f.message}{up} (`{f.source}`)")
    return "\n".join(lines) + "\n"

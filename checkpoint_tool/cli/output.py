"""One output layer for every reporting command: human (rich), json, markdown, junit, html.

Commands build a pydantic report and call ``emit(report, fmt, human=...)``. JSON is the
report's ``model_dump(mode="json")`` with sorted keys, so it is stable for CI diffs.

Example::

    emit(report, "json")                 # prints {"moe_layers": [...], ...}
    emit(report, "human", human=render)  # render(report, console) draws rich tables
    emit(report, "html", html=render_policy_html)  # one self-contained page

HTML goes to stdout like the other formats (``ckpt inspect SRC --format html > map.html``);
a command that draws no HTML refuses ``--format html`` (exit 2) instead of printing JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeVar

from checkpoint_tool.errors import UsageError

if TYPE_CHECKING:  # rich when a human report is drawn; pydantic with the report a command made
    from pydantic import BaseModel
    from rich.console import Console
    from typing_extensions import TypeIs

    from checkpoint_tool.plan.model import Plan


#: the report a command hands to ``emit`` (a pydantic report, or the plan, which has its own
#: JSON writer); its renderers take that same type
R = TypeVar("R", bound="BaseModel | Plan")

#: every format ``emit`` draws; a command offers the ones it has renderers for
OutputFormat = Literal["human", "json", "markdown", "junit", "html"]
#: what a command that draws only a summary table offers (``--format human|json``): typer
#: then refuses ``--format html`` before any work is done
BasicFormat = Literal["human", "json"]
#: ``ckpt inspect --format``: a policy report has no JUnit form (it runs no tests)
InspectFormat = Literal["human", "json", "markdown", "html"]


def stdout_console() -> Console:
    from rich.console import Console

    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def to_json(report: BaseModel | Plan) -> str:
    """Sorted keys, indent 2. The plan (~60 MB for a full-size model) has its own writer for
    that spelling (``plan.serialize``)."""
    if _is_plan(report):
        from checkpoint_tool.plan.serialize import plan_json_text

        return plan_json_text(report)
    return json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True)


def emit(
    report: R,
    fmt: OutputFormat,
    *,
    human: Callable[[R, Console], None] | None = None,
    markdown: Callable[[R], str] | None = None,
    junit: Callable[[R], str] | None = None,
    html: Callable[[R], str] | None = None,
) -> None:
    """Print ``report`` in ``fmt``; formats a command does not support fall back to JSON,
    except html (a page is not JSON): ``UsageError`` (exit 2) there."""
    if fmt == "human" and human is not None:
        human(report, stdout_console())
    elif fmt == "markdown" and markdown is not None:
        sys.stdout.write(markdown(report).rstrip("\n") + "\n")
    elif fmt == "junit" and junit is not None:
        sys.stdout.write(junit(report).rstrip("\n") + "\n")
    elif fmt == "html":
        if html is None:
            raise UsageError("--format html: this command draws no HTML; use json or human")
        _write_utf8(html(report))  # the page declares charset utf-8, whatever the locale
    elif _is_plan(report):  # the plan: written piece by piece, never joined
        from checkpoint_tool.plan.serialize import plan_json_chunks

        for chunk in plan_json_chunks(report):
            sys.stdout.write(chunk)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(to_json(report) + "\n")


def _is_plan(report: object) -> TypeIs[Plan]:
    """Is ``report`` a plan (imported here: most commands never write one)?"""
    from checkpoint_tool.plan.model import Plan

    return isinstance(report, Plan)


def _write_utf8(text: str) -> None:
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8"))
    buffer.flush()

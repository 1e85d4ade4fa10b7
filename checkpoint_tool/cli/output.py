"""One output layer for every reporting command: human (rich), json, markdown, junit.

Commands build a pydantic report and call ``emit(report, fmt, human=...)``. JSON is the
report's ``model_dump(mode="json")`` with sorted keys, so it is stable for CI diffs.

Example::

    emit(report, OutputFormat.json)                # prints {"moe_layers": [...], ...}
    emit(report, OutputFormat.human, human=render)  # render(report, console) draws rich tables
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:  # imported when a human report is drawn (json output never needs rich)
    from rich.console import Console


class OutputFormat(str, Enum):
    human = "human"
    json = "json"
    markdown = "markdown"
    junit = "junit"


def stdout_console() -> Console:
    from rich.console import Console

    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def to_json(report: BaseModel) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True)


def emit(
    report: BaseModel,
    fmt: OutputFormat,
    *,
    human: Callable[[BaseModel, Console], None] | None = None,
    markdown: Callable[[BaseModel], str] | None = None,
    junit: Callable[[BaseModel], str] | None = None,
) -> None:
    """Print ``report`` in ``fmt``; formats a command does not support fall back to JSON."""
    if fmt is OutputFormat.human and human is not None:
        human(report, stdout_console())
    elif fmt is OutputFormat.markdown and markdown is not None:
        sys.stdout.write(markdown(report).rstrip("\n") + "\n")
    elif fmt is OutputFormat.junit and junit is not None:
        sys.stdout.write(junit(report).rstrip("\n") + "\n")
    else:
        sys.stdout.write(to_json(report) + "\n")

"""docs/verify.md and the report's JSON Schema stay true to the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer.main

from checkpoint_tool.cli.app import app
from checkpoint_tool.verify.report import MismatchKind, VerifyReport

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "verify.md"
BENCH = ROOT / "benchmarks" / "bench_verify.py"
SCHEMA = ROOT / "docs" / "schemas" / "verify-report.schema.json"


def test_schema_file_is_current() -> None:
    """Regenerate with: python -c 'from checkpoint_tool.verify.report import write_schema;
    write_schema()'."""
    assert json.loads(SCHEMA.read_text()) == VerifyReport.model_json_schema()


def test_doc_mentions_only_real_options() -> None:
    cmd = typer.main.get_command(app).commands["verify"]
    real = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
    real |= {s for p in cmd.params for s in getattr(p, "secondary_opts", [])}
    used = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", DOC.read_text()))
    foreign = {"--tp", "--fse", "--layout", "--hash-source", "--pad-to"}  # convert's, cited
    foreign |= {"--data", "--convert-workers"}  # synth's and the benchmark's, cited
    foreign |= set(re.findall(r"add_argument\(\s*\"(--[a-z][a-z0-9-]+)", BENCH.read_text()))
    assert used - foreign <= real, sorted(used - foreign - real)


def test_doc_lists_every_mismatch_kind() -> None:
    text = DOC.read_text()
    for kind in MismatchKind.__args__:  # type: ignore[attr-defined]
        assert f"`{kind}`" in text

"""Run ckpt's commands in-process on a checkpoint folder (for the family tests).

Example::

    code, out = ckpt("inspect", str(root), "--format", "json")
    report = validate(root)            # ValidateReport
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.cli.app import main
from checkpoint_tool.policy.build import build_policy
from checkpoint_tool.validate import ValidateOptions, validate_checkpoint


def ckpt(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``ckpt *args``."""
    argv, sys.argv = sys.argv, ["ckpt", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    cap = capsys.readouterr()
    return int(exc.value.code or 0), cap.out, cap.err


def plan_json(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> dict:
    code, out, err = ckpt(capsys, "plan", str(root), "--format", "json", *args)
    assert code == 0, err
    return json.loads(out)


def planned_shapes(plan: dict) -> dict[str, tuple[str, list[str]]]:
    """output tensor -> (dtype, the plan's ops) of every tensor a plan writes."""
    return {t["name"]: (t["dtype"], t["ops"]) for f in plan["files"] for t in f["tensors"]}


def policy(root: Path, **options: object):
    return build_policy(open_catalog(root), **options)  # type: ignore[arg-type]


def validate(root: Path):
    return validate_checkpoint(root, ValidateOptions())


def errors(report) -> list[tuple[str, str | None]]:
    """(rule, tensor) of each error finding of a validate report."""
    return [(f.rule, f.tensor) for f in report.findings() if f.severity == "error"]

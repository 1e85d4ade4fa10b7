"""docs/validate.md and examples/ci stay runnable: same workflow text, only real options."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from checkpoint_tool.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "validate.md"
WORKFLOW = ROOT / "examples" / "ci" / "validate-checkpoint.yml"
SCRIPT = ROOT / "examples" / "ci" / "pre-publish.sh"


def validate_options() -> set[str]:
    import typer.main

    cmd = typer.main.get_command(app).commands["validate"]
    return {opt for p in cmd.params for opt in getattr(p, "opts", [])}


def test_doc_workflow_is_the_example_file() -> None:
    block = re.search(r"```yaml\n(name: validate-checkpoint.*?)```", DOC.read_text(), re.S)
    assert block, "docs/validate.md lost its workflow block"
    body = "\n".join(
        line for line in WORKFLOW.read_text().splitlines() if not line.startswith("#")
    ).strip()
    assert block.group(1).strip() == body


def test_workflow_is_valid_yaml_with_a_validate_step() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["validate"]["steps"]
    assert any("ckpt validate" in s.get("run", "") for s in steps)


def test_pre_publish_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_documented_flags_exist() -> None:
    """Every --flag next to `ckpt validate` in the docs and examples is a real option."""
    known = validate_options()
    texts = [DOC.read_text(), WORKFLOW.read_text(), SCRIPT.read_text()]
    used: set[str] = set()
    for text in texts:
        for line in text.splitlines():
            if "validate" in line or "args" in line:
                used |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", line))
    # flags of other commands quoted in the docs
    used -= {"--tp", "--upgrade", "--index-url", "--noprofile", "--norc"}
    assert used, "no flags found: the regex is broken"
    assert used <= known, f"documented but unknown: {sorted(used - known)}"


def test_help_has_examples() -> None:
    from typer.testing import CliRunner

    out = CliRunner().invoke(app, ["validate", "--help"]).output
    assert "Examples" in out and "--expect-policy" in out


def run_script(ckpt_dir: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "CKPT": str(ROOT / ".venv" / "bin" / "ckpt"),
        "REPORT_DIR": str(tmp_path / "reports"),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), str(ckpt_dir), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # five `ckpt` processes (torch import each)
def test_pre_publish_script_end_to_end(tmp_path: Path) -> None:
    """Clean checkpoint: exit 0, reports kept, manifest written. Broken one: exit 1, no manifest."""
    from .factory import build_checkpoint, poke_tensor

    if not (ROOT / ".venv" / "bin" / "ckpt").exists():
        pytest.skip("no .venv/bin/ckpt entry point in this checkout")
    good = build_checkpoint(tmp_path / "good")
    done = run_script(good, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (good / "ckpt-manifest.json").exists()
    assert (tmp_path / "reports" / "validate.xml").exists()
    assert "ready to publish" in done.stdout
    bad = build_checkpoint(tmp_path / "bad")
    poke_tensor(bad, "model.layers.1.mlp.experts.0.up_proj.weight_scale", 0, b"\xff")
    done = run_script(bad, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not (bad / "ckpt-manifest.json").exists()
    assert "error [scale_values]" in done.stdout

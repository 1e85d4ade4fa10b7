"""``ckpt synth``: list, write, refuse, sizes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from checkpoint_tool.cli.app import app
from checkpoint_tool.cli.synth import parse_size
from checkpoint_tool.errors import OutputError, UsageError
from checkpoint_tool.synth import PRESETS

runner = CliRunner()


def test_list_json_names_every_preset():
    result = runner.invoke(app, ["synth", "--list", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["presets"]
    assert [r["name"] for r in rows] == list(PRESETS)
    assert all(r["summary"] for r in rows)


def test_list_human_is_a_table():
    result = runner.invoke(app, ["synth", "--list"])
    assert result.exit_code == 0
    assert "quark-hybrid" in result.stdout and "deepseek-v4" in result.stdout


def test_synth_writes_and_reports(tmp_path):
    dst = tmp_path / "m"
    args = ["synth", "quark-mxfp4", str(dst), "--layers", "2", "--experts", "2"]
    result = runner.invoke(app, [*args, "--shard-size", "50KB", "--seed", "7", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["preset"] == "quark-mxfp4" and report["seed"] == 7
    assert report["shards"] == len(list(dst.glob("*.safetensors"))) > 1
    again = runner.invoke(app, args)
    assert isinstance(again.exception, OutputError)
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_synth_needs_preset_and_destination():
    result = runner.invoke(app, ["synth", "quark-mxfp4"])
    assert isinstance(result.exception, UsageError)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1000", 1000), ("200KB", 200_000), ("5GB", 5 * 10**9), ("512MiB", 512 << 20), ("1.5k", 1500)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_refuses_garbage():
    with pytest.raises(UsageError, match="shard-size"):
        parse_size("lots")

"""Loading recipes by name and path, and the errors users see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.recipes import load_recipe, recipe_json_schema

SCHEMA_DOC = Path(__file__).parents[2] / "docs" / "schemas" / "recipe.schema.json"


def test_load_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nrules:\n  prefix:\n    - {from: a., to: b.}\n")
    recipe = load_recipe(path)
    assert recipe.name == "mine" and recipe.rules.prefix[0].from_ == "a."
    assert recipe.origin == str(path)


def test_unknown_name_lists_the_bundled_recipes():
    with pytest.raises(UsageError, match=r"unknown recipe 'nope'.*deepseek-v3"):
        load_recipe("nope")


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such recipe file"):
        load_recipe(tmp_path / "missing.yaml")


def test_invalid_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match=r"bad\.yaml: not valid YAML"):
        load_recipe(path)


def test_schema_violation_is_one_line_with_the_location(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nrules:\n  drop:\n    - {match: 'x'}\n")
    with pytest.raises(InputError) as info:
        load_recipe(path)
    msg = info.value.message
    assert "\n" not in msg
    assert "bad.yaml: rules.drop.0.reason" in msg and "ckpt recipes schema" in msg


def test_published_json_schema_is_current():
    expected = json.dumps(recipe_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_DOC.read_text() == expected, (
        "docs/schemas/recipe.schema.json is stale: regenerate it with "
        "`ckpt recipes schema > docs/schemas/recipe.schema.json`"
    )

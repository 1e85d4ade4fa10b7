"""Recipes: named, ordered rename rules that turn checkpoint names into the names a runtime loads.

Public surface::

    load_recipe(name_or_path) -> Recipe       auto_recipe(catalog) -> Recipe
    list_recipes() -> list[Recipe]            RuleSet(recipe, config).rename(name) -> Renamed
"""

from checkpoint_tool.recipes.loader import (
    auto_recipe,
    bundled_dir,
    list_recipes,
    load_recipe,
    recipe_for_config,
)
from checkpoint_tool.recipes.rules import Renamed, RuleSet, scale_spelling
from checkpoint_tool.recipes.schema import RULE_ORDER, Recipe, recipe_json_schema

__all__ = [
    "RULE_ORDER",
    "Recipe",
    "Renamed",
    "RuleSet",
    "auto_recipe",
    "bundled_dir",
    "list_recipes",
    "load_recipe",
    "recipe_for_config",
    "recipe_json_schema",
    "scale_spelling",
]

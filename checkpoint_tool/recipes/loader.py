"""Find and load recipes: bundled ones by name, any YAML file by path, or one picked from config.json.

Bundled recipes live in the top-level ``recipes/`` folder of the source tree; the package
reaches them through ``checkpoint_tool/recipes_data`` (a link to ``../recipes`` in a checkout,
a real folder of copies in an installed wheel: ``pyproject.toml`` lists it as package data).

Example::

    load_recipe("deepseek-v3")              # bundled
    load_recipe("./my-recipe.yaml")         # a file
    auto_recipe(open_catalog("/models/DeepSeek-R1")).name   # 'deepseek-v3'
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.model.config_fields import config_parts
from checkpoint_tool.recipes.schema import Recipe
from checkpoint_tool.yamlio import safe_load

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

GENERIC = "generic"
_SUFFIXES = (".yaml", ".yml")


def bundled_dir() -> Path:
    """The folder holding the bundled ``*.yaml`` recipes."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "recipes_data", package.parent / "recipes"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise InputError(
        f"{package / 'recipes_data'}: bundled recipes are missing; reinstall ckpt or give "
        "--recipe PATH to a recipe file"
    )


def bundled_names() -> list[str]:
    """Names of the bundled recipes, sorted."""
    return sorted(p.stem for p in bundled_dir().glob("*.yaml"))


def list_recipes() -> list[Recipe]:
    """Every bundled recipe, sorted by name."""
    return [load_recipe(name) for name in bundled_names()]


def load_recipe(name_or_path: str | os.PathLike[str]) -> Recipe:
    """Load a bundled recipe by name, or a recipe file by path."""
    text = os.fspath(name_or_path)
    path = Path(text)
    if path.suffix in _SUFFIXES or os.sep in text or path.is_file():
        if not path.is_file():
            raise UsageError(f"{path}: no such recipe file")
        return _load_file(path.resolve(), origin=str(path))
    names = bundled_names()
    if text not in names:
        raise UsageError(
            f"unknown recipe {text!r}; bundled recipes: {', '.join(names)} "
            "(or give a path to a .yaml file)"
        )
    return _load_file(bundled_dir() / f"{text}.yaml", origin=text)


@lru_cache(maxsize=64)
def _load_cached(path: Path, mtime_ns: int) -> Recipe:
    try:
        doc = safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the recipe ({exc})") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({_one_line(str(exc))})") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: a recipe is a YAML mapping (name, family, rules, ...)")
    try:
        return Recipe.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(
            f"{path}: {where}: {first['msg']}{more}; `ckpt recipes schema` prints the format"
        ) from exc


def _load_file(path: Path, *, origin: str) -> Recipe:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise InputError(f"{path}: cannot read the recipe ({exc.strerror})") from exc
    return _load_cached(path, mtime).model_copy(update={"origin": origin})


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _config_keys(config: dict[str, Any] | None) -> tuple[set[str], set[str]]:
    """(model types, architectures) named by any part of config.json: a multimodal wrapper
    names the checkpoint at its top level (``qwen3_5_moe``, ``Qwen3_5MoeForConditionalGeneration``)
    and its language model in ``text_config`` (``qwen3_5_moe_text``); a recipe may match
    either, so every part is read (a union: no precedence to decide)."""
    model_types: set[str] = set()
    archs: set[str] = set()
    for doc in config_parts(config):
        if isinstance(doc.get("model_type"), str):
            model_types.add(doc["model_type"])
        for arch in doc.get("architectures") or []:
            if isinstance(arch, str):
                archs.add(arch)
    return model_types, archs


def recipe_for_config(config: dict[str, Any] | None) -> Recipe:
    """The first bundled recipe (by name) whose ``match`` names the config's model type or
    architecture; ``generic`` when none does."""
    model_types, archs = _config_keys(config)
    for recipe in list_recipes():
        if recipe.name == GENERIC:
            continue
        if model_types & set(recipe.match.model_type) or archs & set(recipe.match.architectures):
            return recipe
    return load_recipe(GENERIC)


def auto_recipe(catalog: Catalog) -> Recipe:
    """Pick a bundled recipe for ``catalog`` from its config.json."""
    return recipe_for_config(catalog.config)

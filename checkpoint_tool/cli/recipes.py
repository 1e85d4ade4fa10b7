"""``ckpt recipes list | show NAME | schema``: the bundled rename recipes and their file format."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from checkpoint_tool.cli.options import FormatOpt
from checkpoint_tool.cli.output import emit
from checkpoint_tool.recipes import RULE_ORDER, list_recipes, load_recipe, recipe_json_schema


class RecipeInfo(BaseModel):
    name: str
    family: str
    target: str
    description: str
    rules: dict[str, int]
    fse_supported: bool
    origin: str


class RecipeList(BaseModel):
    """``ckpt recipes list --format json``: one entry per bundled recipe."""

    rule_order: list[str]
    recipes: list[RecipeInfo]


class RecipeShow(BaseModel):
    """``ckpt recipes show NAME --format json``: the recipe as validated."""

    name: str
    origin: str
    recipe: dict[str, Any]


def _info(recipe) -> RecipeInfo:
    counts = {kind: len(getattr(recipe.rules, kind)) for kind in type(recipe.rules).model_fields}
    return RecipeInfo(
        name=recipe.name,
        family=recipe.family,
        target=recipe.target,
        description=recipe.description,
        rules={k: v for k, v in counts.items() if v},
        fse_supported=recipe.fse.supported,
        origin=recipe.origin,
    )


def _render_list(report: BaseModel, console: Console) -> None:
    assert isinstance(report, RecipeList)
    table = Table(title="bundled recipes", title_justify="left")
    for col in ("name", "family", "target", "rules", "FSE", "description"):
        table.add_column(col, overflow="fold")
    for r in report.recipes:
        rules = ", ".join(f"{k} {v}" for k, v in r.rules.items())
        table.add_row(
            r.name, r.family, r.target, rules, "yes" if r.fse_supported else "no", r.description
        )
    console.print(table)
    console.print(f"rules apply in this order: {' -> '.join(report.rule_order)}")
    console.print("`ckpt recipes show NAME` prints one; `--recipe PATH` takes your own file.")


def register(app: typer.Typer) -> None:
    recipes_app = typer.Typer(
        name="recipes",
        help=(
            "List, show and document the rename recipes.\n\n"
            "Examples:\n\n  ckpt recipes list\n\n  ckpt recipes show deepseek-v4-amd\n\n"
            "  ckpt recipes schema > recipe.schema.json"
        ),
        no_args_is_help=True,
    )

    @recipes_app.command(
        "list", help="List the bundled recipes.\n\nExample:\n\n  ckpt recipes list --format json"
    )
    def list_cmd(
        fmt: FormatOpt = "human",
    ) -> None:
        report = RecipeList(rule_order=list(RULE_ORDER), recipes=[_info(r) for r in list_recipes()])
        emit(report, fmt, human=_render_list)

    @recipes_app.command(
        "show",
        help=(
            "Print one recipe: a bundled name or a path to a .yaml file (human: the file with "
            "its comments; json: the validated model).\n\nExample:\n\n"
            "  ckpt recipes show deepseek-v3"
        ),
    )
    def show_cmd(
        name: Annotated[str, typer.Argument(help="Bundled recipe name or path to a .yaml file.")],
        fmt: FormatOpt = "human",
    ) -> None:
        recipe = load_recipe(name)
        report = RecipeShow(
            name=recipe.name,
            origin=recipe.origin,
            recipe=recipe.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        )

        def human(_: BaseModel, console: Console) -> None:
            from checkpoint_tool.recipes.loader import bundled_dir

            path = bundled_dir() / f"{name}.yaml"
            text = path.read_text() if path.is_file() else open(recipe.origin).read()
            console.print(Syntax(text, "yaml", word_wrap=True))

        emit(report, fmt, human=human)

    @recipes_app.command(
        "schema",
        help=(
            "Print the JSON Schema of a recipe file.\n\nExample:\n\n"
            "  ckpt recipes schema > docs/schemas/recipe.schema.json"
        ),
    )
    def schema_cmd() -> None:
        sys.stdout.write(json.dumps(recipe_json_schema(), indent=2, sort_keys=True) + "\n")

    app.add_typer(recipes_app)

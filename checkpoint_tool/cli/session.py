"""Open SRC and build what a command reports on, with the cycle collector paused.

A full DeepSeek-R1 catalog, its policy and its plan are ~1M small acyclic objects; the
collector would walk them again and again while they are built, so the commands build them
inside ``gc_paused()`` and it collects once, afterwards. ``ckpt plan`` and ``ckpt convert``
share their plan options by parameter name (``PLAN_PARAMS``): the command line maps to
``PlanOptions`` in this one place.

Example::

    with opened("./quark-hybrid") as catalog:   # headers only
        report = build_policy(catalog, tp=2)
    catalog, plan = open_plan("./quark-hybrid", plan_options(ctx), recipe=None)
    plan.options  # PlanOptions(tp=2, layout='hf', fse='auto', ..., layers=[3, 4])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from checkpoint_tool.catalog import Catalog
    from checkpoint_tool.plan.model import Plan, PlanOptions

#: the parameters of ``ckpt plan`` / ``ckpt convert`` that are ``PlanOptions`` fields of the
#: same name (``--tp``, ``--fse``, ``--layout``, ``--target``, ``--pad-to``, ...)
PLAN_PARAMS = ("tp", "layout", "fse", "target", "pad_to", "max_shard_size", "layers")


@contextmanager
def paused_gc() -> Iterator[None]:
    """Automatic garbage collection off for the block (a command's bulk of acyclic objects)."""
    from checkpoint_tool.catalog.bulk import gc_paused

    with gc_paused():
        yield


@contextmanager
def opened(
    src: str, *, headers_only: bool = True, meanwhile: Callable[[], object] | None = None
) -> Iterator[Catalog]:
    """The catalog of ``src``; automatic garbage collection stays off until the block ends."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.catalog.bulk import gc_paused

    with gc_paused():  # ~1M acyclic objects for a full R1: collect once, afterwards
        yield open_catalog(src, headers_only=headers_only, meanwhile=meanwhile)


def _import_planner() -> None:
    """What planning needs, imported (~0.3 s: numpy, the policy, the recipes, pydantic
    models)."""
    import checkpoint_tool.plan.build  # noqa: F401


def plan_options(ctx: typer.Context) -> PlanOptions:
    """``ckpt plan SRC --tp 2 --fse off`` -> ``PlanOptions(tp=2, fse="off", ...)``."""
    from checkpoint_tool.plan.model import PlanOptions

    return PlanOptions(**{name: ctx.params[name] for name in PLAN_PARAMS})


def open_plan(
    src: str,
    options: PlanOptions,
    *,
    recipe: str | None,
    headers_only: bool = True,
    requant: Any = None,
) -> tuple[Catalog, Plan]:
    """Open ``src`` and plan its conversion (``recipe`` None: the one config.json matches);
    ``requant``: a ``requant.select.RequantRequest`` (``--requantize-shared``). The planner
    is imported while a forked child reads the shard headers (``catalog.header_pool``)."""
    if requant is not None:
        headers_only = False  # the error preview reads the shared experts' weights
    with opened(src, headers_only=headers_only, meanwhile=_import_planner) as catalog:
        from checkpoint_tool.plan.build import plan_for_catalog

        if requant is not None:
            from checkpoint_tool.requant.plan import plan_with_requant

            plan = plan_with_requant(catalog, options, requant, recipe=recipe)
        else:
            plan = plan_for_catalog(catalog, options, recipe=recipe)
    return catalog, plan

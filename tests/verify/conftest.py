"""Fixtures: synth sources converted once per session (execute API), and corruptible copies.

``converted(preset, tp=1, **synth_opts) -> (src, dst)`` plans and executes a conversion of
``synth_ckpt(preset, **synth_opts)`` once per session; treat both folders as read-only and
corrupt a copy (``dst_copy``).

Example::

    def test_x(converted, dst_copy):
        src, dst = converted("quark-mxfp4", tp=2)
        bad = dst_copy(dst)               # a private copy under tmp_path
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def converted(
    synth_ckpt: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[Path, Path]]:
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.execute import execute_plan, writer
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions

    cache: dict[str, tuple[Path, Path]] = {}

    def make(preset: str, tp: int = 1, fse: str = "auto", layout: str = "hf", **synth_opts: object):
        key = json.dumps([preset, tp, fse, layout, synth_opts], sort_keys=True)
        if key not in cache:
            src = synth_ckpt(preset, **synth_opts)
            dst = tmp_path_factory.mktemp(f"conv-{preset}-tp{tp}") / "out"
            catalog = open_catalog(src, headers_only=False)
            # for an engine that fuses per layer: these tests verify FSE slots, which the
            # default target (a stock vLLM, no fused shared experts) never gets
            options = PlanOptions(tp=tp, fse=fse, layout=layout, target="vllm-per-layer-fse")
            plan = plan_for_catalog(catalog, options)
            durable, writer.DURABLE = writer.DURABLE, False  # tests simulate no power loss
            try:
                execute_plan(plan, catalog, dst, progress=False)
            finally:
                writer.DURABLE = durable
            cache[key] = (src, dst)
        return cache[key]

    return make


@pytest.fixture
def dst_copy(tmp_path: Path) -> Callable[[Path], Path]:
    def copy(dst: Path) -> Path:
        out = tmp_path / "corrupt"
        shutil.copytree(dst, out)
        return out

    return copy

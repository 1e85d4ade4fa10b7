"""Golden files: ``ckpt plan`` and ``ckpt inspect --format json`` of every synth preset, byte
for byte, and each plan's ``plan_sha256``.

They pin the outputs across refactors of the code underneath (the catalog, the planner):
such a change must leave every file as it is. Cases are in ``golden_cases.py`` (plan at
TP 1 on the preset's defaults, plan at TP 2 with padded experts, inspect); outputs are
gzipped in ``data/``; the checkpoint folder, which only ``inspect`` prints, reads ``<SRC>``.

When an output change is intended, regenerate and review the diff::

    python tests/golden/regen.py
    git diff --stat tests/golden/data
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from golden_cases import (
    CASES,
    SHA_FILE,
    build_sources,
    golden_name,
    plan_sha,
    presets,
    read_golden,
    run_case,
)

NAMES = [golden_name(p, c) for p in presets() for c in CASES]


@pytest.fixture(scope="session")
def golden_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    sources = build_sources(tmp_path_factory.mktemp("golden"))
    return {golden_name(p, c): run_case(sources[(p, c.build)], c) for p in presets() for c in CASES}


def _first_difference(want: bytes, got: bytes) -> str:
    diff = difflib.unified_diff(
        want.decode().splitlines(), got.decode().splitlines(), "golden", "now", lineterm="", n=2
    )
    return "\n".join(list(diff)[:40])


@pytest.mark.parametrize("name", NAMES)
def test_output_matches_the_golden_file(golden_outputs: dict[str, bytes], name: str) -> None:
    want, got = read_golden(name), golden_outputs[name]
    assert got == want, f"{name} changed:\n{_first_difference(want, got)}"


@pytest.mark.parametrize("name", [n for n in NAMES if ".plan-" in n])
def test_plan_sha256_matches(golden_outputs: dict[str, bytes], name: str) -> None:
    shas = json.loads(SHA_FILE.read_text())
    assert plan_sha(golden_outputs[name]) == shas[name]


def test_every_golden_file_is_a_case() -> None:
    on_disk = {p.name.removesuffix(".gz") for p in Path(SHA_FILE.parent).glob("*.json.gz")}
    assert on_disk == set(NAMES)

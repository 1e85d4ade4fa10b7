"""Fixtures of the corpus tests: twins built once per session, outputs of ckpt commands.

Example::

    def test_x(twin):
        full = twin("deepseek-r1-0528", "full")   # sparse, published sizes
        tiny = twin("deepseek-r1-0528", "tiny")   # real data, shrunk dims
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import twins


@pytest.fixture(scope="session")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    cache: dict[tuple[str, str], Path] = {}

    def make(case: str, size: str) -> Path:
        if (case, size) not in cache:
            dst = tmp_path_factory.mktemp(f"{case}-{size}") / "ckpt"
            cache[(case, size)] = twins.write_twin(twins.load_case(case), size, dst)
        return cache[(case, size)]

    return make

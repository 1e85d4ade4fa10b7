"""Distributed-run tests simulate process kills, not power loss: skip fsync to keep them fast."""

from __future__ import annotations

import pytest

from checkpoint_tool.execute import writer


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "DURABLE", False)

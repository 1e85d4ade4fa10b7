"""Fixtures: a loopback hub server (``HF_ENDPOINT``) and ``ckpt`` run through its entry point.

Every test gets its own hub cache (``HF_HUB_CACHE``), short backoff and timeouts, and no
token unless it sets one; servers listen on 127.0.0.1 only and stop with the test.

Example::

    def test_x(hub, ckpt):
        code, out, err = ckpt("inspect", "hf://org/tiny@main", "--format", "json")
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from checkpoint_tool.execute import writer as writer_mod
from tests.remote.hub_server import HubRepo, HubServer

REPO = "org/tiny"
COMMIT = "c0ffee" + "0" * 34
V1 = "1111111111111111111111111111111111111111"


@pytest.fixture(autouse=True)
def _remote_env(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(writer_mod, "DURABLE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("CKPT_CACHE", str(tmp_path / "ckpt-cache"))
    monkeypatch.setenv("CKPT_REMOTE_BACKOFF", "0.01")
    monkeypatch.setenv("CKPT_REMOTE_TIMEOUT", "5")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))


@pytest.fixture
def tiny(synth_ckpt) -> Path:
    """Nine shards of a DeepSeek-V3 layout in vLLM geometry, with config, index and side files."""
    return synth_ckpt("deepseek-v3-fp8")


@pytest.fixture
def hub(tiny, monkeypatch) -> Iterator[HubServer]:
    repo = HubRepo(tiny, commit=COMMIT, branches={"main": COMMIT, "v1": V1})
    with HubServer({REPO: repo}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


@pytest.fixture
def ckpt(monkeypatch, capsys) -> Callable[..., tuple[int, str, str]]:
    """``ckpt *argv`` through ``cli.app.main``: ``(exit code, stdout, stderr)``."""
    from checkpoint_tool.cli.app import main

    def run(*argv: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["ckpt", *argv])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


_REFERENCES: dict[tuple[str, ...], Path] = {}


@pytest.fixture
def reference(tiny, ckpt, tmp_path_factory) -> Callable[..., Path]:
    """``reference(*convert options)``: DST of converting the local ``tiny`` folder with those
    options, once per session (the expected output of every remote conversion)."""

    def make(*options: str) -> Path:
        if options not in _REFERENCES:
            dst = tmp_path_factory.mktemp("reference") / "out"
            code, _, err = ckpt("convert", str(tiny), str(dst), *options)
            assert code == 0, err
            _REFERENCES[options] = dst
        return _REFERENCES[options]

    return make


def tree(root: Path, suffixes: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under ``root`` (or those ending in ``suffixes``) by relative name."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and (not suffixes or p.name.endswith(suffixes))
    }

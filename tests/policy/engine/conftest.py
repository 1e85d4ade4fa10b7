"""Helpers for engine-rule tests: small synth checkpoints with config.json edited in tmp_path.

``variant(preset, edit=None, copy=(), **synth_opts) -> Path`` links every file of a cached
synth checkpoint into a fresh folder (``copy``: names of files to copy instead, so their
bytes can be patched; hard links are read-only by convention), then applies ``edit(quantization_config)`` to config.json.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def variant(synth_ckpt, tmp_path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def make(
        preset: str,
        edit: Callable[[dict], None] | None = None,
        copy: tuple[str, ...] = (),
        **opts: object,
    ) -> Path:
        src = synth_ckpt(preset, **opts)
        dst = tmp_path / f"{preset}-{next(counter)}"
        dst.mkdir()
        for f in src.iterdir():
            if f.name == "config.json" or f.name in copy:
                shutil.copy(f, dst / f.name)
            else:
                _link(f, dst / f.name)
        if edit is not None:
            cfg = json.loads((dst / "config.json").read_text())
            edit(cfg["quantization_config"])
            (dst / "config.json").write_text(json.dumps(cfg))
        return dst

    return make


def _link(src: Path, dst: Path) -> None:
    """Hard link (the catalog refuses symlinks that leave the folder); copy across devices."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy(src, dst)

"""Output layouts: how the planned output tensors become files.

Each layout is a module here exposing::

    build_files(ctx: PlanInputs, planned: Planned) -> list[OutputFile]

``planned`` holds HF-style output tensors (per-expert tensors, renamed, FSE-redirected and
padded to the padded intermediate size, whole: not TP-sliced). ``hf`` groups them into
balanced shards; ``vllm-sharded`` (module ``vllm_sharded``) slices them per TP rank and
stacks experts into vLLM's parameters, setting ``OutputFile.rank``.

Example::

    get_layout("hf").build_files(ctx, planned)
"""

from __future__ import annotations

import importlib
from types import ModuleType

from checkpoint_tool.errors import UsageError

#: --layout value -> module name in this package
LAYOUTS: dict[str, str] = {"hf": "hf", "vllm-sharded": "vllm_sharded"}


def get_layout(name: str) -> ModuleType:
    """The layout module for ``--layout name``."""
    module = LAYOUTS.get(name)
    if module is None:
        raise UsageError(f"unknown --layout {name!r}; choose one of {', '.join(LAYOUTS)}")
    try:
        return importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module}":
            raise
        raise UsageError(
            f"--layout {name} is not available in this version of ckpt yet; use --layout hf"
        ) from None

"""ckpt's engine judge: a vLLM general plugin, inert unless ``CKPT_ENGINE_JUDGE=1``.

With it set (the engine tier sets it in its child processes only), ``register`` applies the
capability patches (``capability.PATCHES``: kernel / backend choice, the FSE request, a cuda
allocation) and the observers (``observe``: per-parameter write counts, a byte snapshot before
``process_weights_after_loading``). vLLM calls ``register`` in every process it starts, TP
workers included.

Example::

    CKPT_ENGINE_JUDGE=1 CKPT_ENGINE_JUDGE_FSE=1 CKPT_ENGINE_JUDGE_DUMP=/out/dump \\
        python -c "from vllm import LLM; LLM('/out/model', enforce_eager=True)"
"""

from __future__ import annotations

import os

ENV = "CKPT_ENGINE_JUDGE"


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point."""
    if os.environ.get(ENV) != "1":
        return
    from . import capability, observe

    capability.apply_all()
    observe.install()

"""``--deep``: run the MoE runtime on a few sampled layers and check the outputs are sane.

Skipped (with the reason) unless ``--deep`` is given, and when ``checkpoint_tool.runtime`` is
not importable.
"""

from __future__ import annotations

from checkpoint_tool.report import Issue
from checkpoint_tool.validate.context import Unavailable, ValidationContext


def check_deep_runtime(ctx: ValidationContext) -> list[Issue]:
    """With --deep: sampled MoE layers run through the runtime give finite, sane outputs."""
    if not ctx.options.deep:
        raise Unavailable("not requested; pass --deep")
    try:
        from checkpoint_tool.runtime import moe  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"the MoE runtime is not available ({exc})") from None
    raise Unavailable("the runtime check is not wired yet")

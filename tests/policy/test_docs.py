"""docs/inspect.md lists every FSE reason code with its exact text."""

from __future__ import annotations

from pathlib import Path

from checkpoint_tool.policy.fse import OPTION_REASONS
from checkpoint_tool.policy.fse_gates import VLLM_REASONS
from checkpoint_tool.policy.fse_layout import CKPT_REASONS

DOC = (Path(__file__).parents[2] / "docs" / "inspect.md").read_text(encoding="utf-8")


def test_every_reason_is_documented_verbatim():
    for source, table in (("vllm", VLLM_REASONS), ("ckpt", CKPT_REASONS)):
        for code, text in table.items():
            assert f"| `{code}` | {source} | `{text}` |" in DOC, code
    for code, text in OPTION_REASONS.items():
        assert f"| `{code}` |" in DOC and f"`{text}`" in DOC, code

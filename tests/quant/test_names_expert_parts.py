"""``expert_parts`` (string methods, for speed) agrees with the regex it documents."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_tool.quant.configs.names import expert_key, expert_parts

#: the specification, written independently of the implementation
SPEC = re.compile(r"(.*\.experts)\.(\d+)\.([A-Za-z0-9_]+)")


def spec(module: str) -> tuple[str, int, str] | None:
    m = SPEC.fullmatch(module)
    return None if m is None else (m[1], int(m[2]), m[3])


PIECES = st.sampled_from(
    ["experts", ".experts.", ".", "3", "17", "\u0663", "gate_proj", "w1", "_", "-", "é", "mlp"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PIECES, max_size=8).map("".join))
def test_agrees_with_the_regex(module: str) -> None:
    want = spec(module)
    assert expert_parts(module) == want
    assert expert_key(module) == (None if want is None else (want[0], want[2]))


def test_known_names() -> None:
    assert expert_parts("model.layers.3.mlp.experts.7.down_proj") == (
        "model.layers.3.mlp.experts",
        7,
        "down_proj",
    )
    assert expert_parts("model.layers.3.mlp.shared_experts.down_proj") is None
    assert expert_parts("model.layers.3.mlp.experts.gate_up_proj") is None
    assert expert_parts("a.experts.1.experts.2.w3") == ("a.experts.1.experts", 2, "w3")

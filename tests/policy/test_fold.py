"""Folding names into one pattern: each case states the pattern by hand."""

from __future__ import annotations

import random

from checkpoint_tool.policy.fold import batches, fold_names, int_ranges


def test_mtp_expert_excludes_fold_to_one_pattern():
    names = [
        f"model.layers.61.mlp.experts.{e}.{p}"
        for e in range(256)
        for p in ("gate_proj", "up_proj", "down_proj")
    ]
    random.Random(0).shuffle(names)
    assert fold_names(names) == "model.layers.61.mlp.experts.{0..255}.{down_proj,gate_proj,up_proj}"


def test_names_of_different_depth_fold_apart_and_many_words_become_a_star():
    names = [
        "lm_head",
        *[f"model.layers.{i}.self_attn.{p}" for i in (1, 2, 3, 7) for p in "abcdefg"],
    ]
    assert fold_names(names) == "lm_head; model.layers.{1..3,7}.self_attn.*"


def test_int_ranges():
    assert int_ranges([9, 0, 1, 2, 3, 5]) == "0..3,5,9"
    assert int_ranges([4]) == "4"


def test_few_repeats_stay_apart():
    assert batches(["a", "b", "c"]) == [["a"], ["b"], ["c"]]
    assert batches(list("abcd")) == [list("abcd")]

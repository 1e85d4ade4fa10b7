"""The input checks one by one: JSON limits, header duplicates, config ranges, regex bounds,
renamed names, and the indexed Quark exclude list against the plain list walk it replaced."""

from __future__ import annotations

import fnmatch
import random
import re
import time

import pytest

from checkpoint_tool.catalog.json_input import MAX_JSON_DEPTH, load_json
from checkpoint_tool.catalog.safetensors_format import build_header, parse_header
from checkpoint_tool.errors import InputError
from checkpoint_tool.model.config_checks import check_config
from checkpoint_tool.quant.configs.names import expert_parts
from checkpoint_tool.quant.configs.quark_exclude import ExcludeIndex
from checkpoint_tool.recipes.rules import check_written_name
from checkpoint_tool.safe_regex import check_regex


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e999}',
        b'{"a": ' + b"1" * 5000 + b"}",
        b"[" * 200_000 + b"]" * 200_000,
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
        b"\xff\xfe",
    ],
)
def test_bad_json_is_one_input_error(raw):
    with pytest.raises(InputError) as exc:
        load_json(raw, "config.json")
    assert exc.value.message.startswith("config.json: ") and "\n" not in exc.value.message


def test_json_at_the_depth_limit_loads():
    raw = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert load_json(raw, "x") is not None


def _header(tensors, text_edit=None):
    prefix, _ = build_header(tensors)
    text = prefix[8:].decode().rstrip()
    if text_edit:
        text = text_edit(text)
    raw = text.encode()
    data = sum(2 * s[0] for _, _, s in tensors)
    return raw, 8 + len(raw) + data


def test_duplicate_tensor_in_header_is_refused():
    tensors = [("a.weight", "BF16", (4,)), ("b.weight", "BF16", (4,))]
    dup = ', "a.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}'
    raw, size = _header(tensors, lambda t: t[:-1] + dup)
    with pytest.raises(InputError, match="written twice"):
        parse_header("s.safetensors", len(raw), raw, size)
    raw, size = _header(tensors)
    assert parse_header("s.safetensors", len(raw), raw, size).columns.count == 2


def test_a_name_holding_a_key_is_not_a_duplicate():
    tensors = [('x"data_offsets', "BF16", (4,)), ("b", "BF16", (4,))]
    raw, size = _header(tensors)
    assert parse_header("s.safetensors", len(raw), raw, size).columns.count == 2


@pytest.mark.parametrize(
    "meta", ['{"k": {"x": 1}}', '{"k": 1}', "[1]", '{"k": ' + "[" * 5000 + "]" * 5000 + "}"]
)
def test_metadata_must_be_strings(meta):
    raw, size = _header([("a", "BF16", (4,))], lambda t: '{"__metadata__": ' + meta + ", " + t[1:])
    with pytest.raises(InputError):
        parse_header("s.safetensors", len(raw), raw, size)


R1 = {
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "rms_norm_eps": 1e-6,
    "routed_scaling_factor": 2.5,
}


@pytest.mark.parametrize(
    "edit",
    [
        {"num_hidden_layers": 10**9},
        {"n_routed_experts": -8},
        {"n_routed_experts": 10**9},
        {"moe_intermediate_size": 0},
        {"num_experts_per_tok": 0},
        {"num_experts_per_tok": 257},
        {"n_shared_experts": -1},
        {"hidden_size": True},
        {"hidden_size": 7168.0},
        {"rms_norm_eps": float("inf")},
        {"routed_scaling_factor": float("nan")},
        {"routed_scaling_factor": 0},
        {"text_config": {"num_hidden_layers": 4, "num_experts": -1}},
    ],
)
def test_config_out_of_range_is_refused(edit):
    check_config(R1)
    with pytest.raises(InputError, match=r"^config\.json: "):
        check_config({**R1, **edit})


@pytest.mark.parametrize(
    "pattern",
    [r"^([a-z_.0-9]+)+!$", r"(\w*\.)*x", r"(a|ab)*c", r"(a)\1", ".*" * 4 + "!", "x" * 1001, "("],
)
def test_unbounded_regexes_are_refused(pattern):
    with pytest.raises(InputError):
        check_regex(pattern, "where")


@pytest.mark.parametrize(
    "pattern",
    [
        r".*self_attn.*",
        r"model\.layers\.\d+\.mlp\.gate$",
        r"(\.experts\.\d+\.w[123])\.scale$",
        r"^(?:model\.)?layers\.(\d+)\.",
        "model.layers.*.mlp.experts.*",
    ],
)
def test_real_regexes_pass_and_run_fast(pattern):
    check_regex(pattern, "where")
    name = "model.layers.61.mlp.experts.255.down_proj.weight_scale_inv" * 2
    t = time.perf_counter()
    re.match(pattern + "!", name)
    assert time.perf_counter() - t < 0.05


@pytest.mark.parametrize("bad", ["", "__metadata__", "a\nb", "x" * 1025])
def test_renamed_names_must_be_tensor_names(bad):
    with pytest.raises(InputError, match="not a valid tensor name"):
        check_written_name("model.norm.weight", bad, ["regex[0]"])


# -- the exclude index against the list walk it replaced (the matchers as they were) -----


def _vllm_walk(exclude, module):
    moe = expert_parts(module)
    layer = moe[0] if moe else module
    for entry in exclude:
        if entry.startswith("re:"):
            if re.match(entry[3:], layer):
                return entry, "re.match"
        elif entry == layer:
            return entry, "exact"
        elif moe and entry.startswith(layer + "."):
            return entry, "child"
    return None


def _producer_walk(exclude, module):
    if module in exclude:
        return module, "exact"
    for entry in exclude:
        if entry.startswith("re:"):
            if re.match(entry[3:], module):
                return entry, "re.match"
        elif fnmatch.fnmatch(module, entry):
            return entry, "fnmatch"
    return None


def _modules(rng):
    out = ["lm_head", "model.embed_tokens"]
    for layer in range(4):
        p = f"model.layers.{layer}"
        out += [f"{p}.self_attn.{x}" for x in ("q_a_proj", "kv_b_proj", "o_proj")]
        out += [f"{p}.mlp.experts.{e}.{x}" for e in range(4) for x in ("gate_proj", "down_proj")]
        out += [f"{p}.mlp.shared_experts.up_proj", f"{p}.mlp.gate"]
    return out


@pytest.mark.parametrize("seed", range(30))
def test_exclude_index_answers_as_the_list_walk(seed):
    rng = random.Random(seed)
    modules = _modules(rng)
    pool = [
        *modules,
        "model.layers.1.mlp.experts",
        "re:.*self_attn.*",
        "re:model\\.layers\\.[13]\\.",
        "re:.*experts$",
        "*down_proj",
        "model.layers.2.*",
        "model.layers.?.mlp.gate",
        "[ab]*",
        "nothing.here",
    ]
    exclude = [rng.choice(pool) for _ in range(rng.randint(0, 25))]
    index = ExcludeIndex(exclude)
    for module in modules:
        moe = expert_parts(module)
        layer = moe[0] if moe else module
        assert index.vllm_first(layer, moe is not None) == _vllm_walk(exclude, module)
        assert index.producer_first(module) == _producer_walk(exclude, module)


def test_exclude_of_100k_names_is_fast():
    exclude = [f"model.layers.{i}.x.{j}" for i in range(100) for j in range(1000)]
    exclude.append("model.layers.7.mlp.experts.3.up_proj")
    t = time.perf_counter()
    index = ExcludeIndex(exclude)
    hits = [index.vllm_first(f"model.layers.{i}.mlp.experts", True) for i in range(50_000)]
    assert time.perf_counter() - t < 5
    assert hits[7] == ("model.layers.7.mlp.experts.3.up_proj", "child")
    assert hits[8] is None

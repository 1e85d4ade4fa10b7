"""Fuzzing the inputs a checkpoint brings: safetensors headers and config.json.

Each example takes a small Quark MXFP4 checkpoint (two layers, four experts), breaks one
shard's header or config.json the way hypothesis chooses (any JSON in any field, duplicate
keys, NaN / Infinity, deep nesting, huge and negative numbers, bad ``__metadata__``), and runs
``inspect``, ``validate`` and ``convert --tp 2`` on it in this process. Each must end with exit
0, 1 or 2 and never an exception (a traceback); a failed convert leaves nothing under a final
name in DST. Bounded for CI: ~20 examples per test, ~1 s each.
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint_tool.cli.app import main
from checkpoint_tool.execute import writer as writer_mod

FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NUMBERS = st.sampled_from(
    [-(2**63), -8, -1, 0, 1, 2, 3, 7, 8, 64, 1025, 10**9, 2**64, 10**400, 0.5, -0.0, 1e308]
)
SCALARS = st.one_of(
    NUMBERS,
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)
JSON = st.recursive(
    SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=8,
)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    monkeypatch.setattr(writer_mod, "DURABLE", False)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from checkpoint_tool.synth import synth_checkpoint

    dst = tmp_path_factory.mktemp("fuzz-base") / "ckpt"
    return synth_checkpoint("quark-mxfp4", dst, num_layers=2, n_routed=4, shards=2)


def _ckpt(monkeypatch, capsys, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["ckpt", *argv])
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    capsys.readouterr()
    assert code in (0, 1, 2, None), f"ckpt {argv[0]} exited {code!r}"
    return int(code or 0)


def _judge(monkeypatch, capsys, src: Path) -> None:
    """inspect, validate and convert end in 0/1/2; a failed convert writes no final name."""
    _ckpt(monkeypatch, capsys, "inspect", str(src), "--tp", "2")
    _ckpt(monkeypatch, capsys, "validate", str(src))
    dst = src.parent / "out"
    rc = _ckpt(monkeypatch, capsys, "convert", str(src), str(dst), "--tp", "2")
    if rc != 0 and dst.exists():
        final = [
            p.name
            for p in dst.iterdir()
            if not p.name.startswith(".") and not p.name.endswith(".partial")
        ]
        assert final == [], f"failed convert (exit {rc}) left {final}"


def _copy(base: Path, tmp: Path) -> Path:
    src = tmp / "src"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(base, src)
    return src


def _read_shard(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write_shard(path: Path, header_text: str, data: bytes) -> None:
    raw = header_text.encode("utf-8", "surrogatepass")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@st.composite
def header_edits(draw: st.DrawFn) -> tuple[str, int, object]:
    kind = draw(
        st.sampled_from(
            ["dtype", "shape", "data_offsets", "entry", "metadata", "duplicate", "deep", "name"]
        )
    )
    return kind, draw(st.integers(0, 10**6)), draw(JSON)


@FUZZ
@given(edit=header_edits())
def test_fuzzed_header(monkeypatch, capsys, tmp_path_factory, base, edit):
    kind, pick, value = edit
    src = _copy(base, tmp_path_factory.getbasetemp() / "fuzz-header")
    shard = sorted(src.glob("*.safetensors"))[0]
    doc, data = _read_shard(shard)
    names = [n for n in doc if n != "__metadata__"]
    name = names[pick % len(names)]
    text: str
    if kind in ("dtype", "shape", "data_offsets"):
        doc[name][kind] = value
    elif kind == "entry":
        doc[name] = value
    elif kind == "metadata":
        doc["__metadata__"] = value
    elif kind == "name":
        doc[str(value)[:40]] = doc.pop(name)
    if kind == "duplicate":  # the same tensor written twice
        body = json.dumps(doc)
        text = body[:-1] + ", " + json.dumps(name) + ": " + json.dumps(doc[name]) + "}"
    elif kind == "deep":
        depth = 1000 + pick % 200_000
        text = json.dumps(doc)[:-1] + ', "__metadata__": ' + "[" * depth + "]" * depth + "}"
    else:
        text = json.dumps(doc)
    _write_shard(shard, text, data)
    _judge(monkeypatch, capsys, src)


CONFIG_KEYS = [
    "num_hidden_layers",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "hidden_size",
    "first_k_dense_replace",
    "rms_norm_eps",
    "routed_scaling_factor",
    "quantization_config",
    "model_type",
]


@FUZZ
@given(key=st.sampled_from([*CONFIG_KEYS, "exclude", "deep"]), value=JSON)
def test_fuzzed_config(monkeypatch, capsys, tmp_path_factory, base, key, value):
    src = _copy(base, tmp_path_factory.getbasetemp() / "fuzz-config")
    config = json.loads((src / "config.json").read_text())
    if key == "exclude":
        config["quantization_config"]["exclude"] = value
    elif key != "deep":
        config[key] = value
    text = json.dumps(config)  # NaN / Infinity written as Python writes them
    if key == "deep":
        text = text[:-1] + ', "x": ' + '{"a": ' * 150_000 + "1" + "}" * 150_001
    (src / "config.json").write_text(text)
    _judge(monkeypatch, capsys, src)


@pytest.mark.parametrize(
    "pattern", ["re:^([a-z_.0-9]+)+!$", "re:(a|ab)*c", "re:.*.*.*.*.*.*!", "re:(x)\\1"]
)
def test_catastrophic_exclude_regex_is_refused_at_once(
    monkeypatch, capsys, tmp_path, base, pattern
):
    src = _copy(base, tmp_path / "rx")
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"]["exclude"].append(pattern)
    (src / "config.json").write_text(json.dumps(config))
    for cmd in ("inspect", "convert"):
        args = [cmd, str(src)] + ([str(tmp_path / "out"), "--tp", "2"] if cmd == "convert" else [])
        monkeypatch.setattr(sys, "argv", ["ckpt", *args])
        with pytest.raises(SystemExit) as exc:
            main()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "regex" in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

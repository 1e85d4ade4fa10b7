"""The two Quark spec interpreters read one record and agree on the format.

``quark_spec.scheme_from_spec`` says what the files hold (ckpt ``Scheme``);
``quark_detect.detect_linear`` / ``detect_moe`` say what vLLM builds. Both read the spec through
``quark_record``. Over a grid of generated specs (the dtype / qscheme / group / block / scale
spellings of the Quark 0.13 fixtures and synth presets, and variations of each), wherever both
answer, the answers are one format; a format vLLM builds and ckpt has a codec for is never
"unsupported" to ckpt; the real specs' answers are pinned; and perturbing one field of the
record changes both answers, so neither reader can read that field on its own.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import json
from pathlib import Path

import pytest

from checkpoint_tool.policy import fse_gates
from checkpoint_tool.policy.engine import quark_detect
from checkpoint_tool.policy.engine.quark_detect import Detection, detect_linear, detect_moe
from checkpoint_tool.quant.configs import quark_spec
from checkpoint_tool.quant.configs.quark_record import QuarkLayer, QuarkTensor
from checkpoint_tool.quant.configs.quark_spec import QuarkLayerSpec, scheme_from_spec
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.scheme import WeightFormat as F

SYNTH = json.loads(
    (Path(__file__).resolve().parents[2] / "checkpoint_tool/synth/quark_specs.json").read_text()
)["specs"]

#: ckpt format -> the format family both sides name
CKPT_FAMILY = {
    F.MXFP4: "mxfp4",
    F.MXFP8: "mxfp8",
    F.FP8_PER_TENSOR: "fp8",
    F.FP8_PER_CHANNEL: "fp8",
    F.FP8_BLOCK: "fp8_block",
    F.NVFP4: "nvfp4",
    F.UNQUANTIZED: "unquantized",
}
#: the families ckpt has a codec for: when vLLM builds one, ckpt must not call it unsupported
CODEC_FAMILIES = {"mxfp4", "mxfp8", "fp8", "fp8_block", "nvfp4"}


def detect_family(det: Detection, layer: QuarkLayer) -> str | None:
    """vLLM's answer as a family: ``ocp_mx`` by weight dtype (w_mxfp4 / w_mxfp8 / w_mxfp6)."""
    if det.scheme == "ocp_mx":
        w = layer.weight.one if layer.weight else None
        return {"fp4": "mxfp4", "fp8_e4m3": "mxfp8"}.get(w.dtype if w else "", "mxfp6")
    return {"w4a8_mxfp4_fp8": "mxfp4"}.get(det.scheme or "", det.scheme)


def agree(scheme: Scheme, fam: str, layer: QuarkLayer) -> bool:
    """ckpt's scheme and vLLM's family name one format (with its geometry)."""
    mine = CKPT_FAMILY.get(scheme.format)
    if fam in ("mxfp4", "mxfp8"):
        if mine == "fp8_block" and fam == "mxfp8":
            # MXFP8's 2-D spelling (per_block [R, 32], e8m0): ckpt stores it as an FP8 block
            # of R x 32 with E8M0 scales, the same bytes
            return scheme.block is not None and scheme.block[1] == 32 and scheme.scale_is_e8m0
        return mine == fam and scheme.group_size == 32 and scheme.scale_is_e8m0
    if fam == "nvfp4":
        return mine == fam and scheme.group_size == 16
    if fam == "fp8_block":
        return mine == fam and scheme.block == (128, 128)
    if fam == "fp8":
        w = layer.weight.one if layer.weight else None
        want = {"per_tensor": F.FP8_PER_TENSOR, "per_channel": F.FP8_PER_CHANNEL}
        return w is not None and scheme.format is want.get(w.qscheme or "")
    return mine == fam


# -- the grid ----------------------------------------------------------------------------------


def _tensor(
    dtype: str,
    qscheme: str,
    group: int | None,
    block: list[int] | None,
    scale_format: str | None,
    scale_type: str,
    dynamic: bool = False,
    sym: bool = True,
) -> dict:
    """A Quark 0.13 tensor config (the keys every 0.13 export writes that the readers read)."""
    return {
        "dtype": dtype,
        "qscheme": qscheme,
        "group_size": group,
        "block_size": block,
        "scale_format": scale_format,
        "scale_type": scale_type,
        "is_dynamic": dynamic,
        "symmetric": sym,
        "ch_axis": 0 if qscheme == "per_channel" else None,
    }


def _weights() -> list[dict]:
    out = []
    for dtype, qscheme, group, scale_format, scale_type in itertools.product(
        ["fp4", "fp8_e4m3", "int4", "int8", "fp6_e2m3"],
        ["per_tensor", "per_channel", "per_group", "per_block"],
        [None, 16, 32, 128],
        [None, "e8m0", "E8M0", "float32"],
        ["float", "float32", "float8_e8m0fnu"],
    ):
        blocks = (
            [None, [128, 128], [1, 32], [32, 32], [64, 64]] if qscheme == "per_block" else [None]
        )
        for block in blocks:
            out.append(_tensor(dtype, qscheme, group, block, scale_format, scale_type))
    for name in SYNTH:  # the real weights, with is_dynamic / symmetric unset or flipped
        w = SYNTH[name]["weight"]
        for t in w if isinstance(w, list) else [w]:
            out += [{**t, "is_dynamic": None}, {**t, "symmetric": None}, {**t, "symmetric": False}]
    return out


def _inputs() -> list:
    real = [
        SYNTH[n]["input_tensors"] for n in SYNTH if not isinstance(SYNTH[n]["input_tensors"], list)
    ]
    mx_fp8 = _tensor("fp8_e4m3", "per_group", 32, None, None, "float", dynamic=True)
    static_pt = _tensor("fp8_e4m3", "per_tensor", None, None, None, "float", dynamic=False)
    return [None, *real, mx_fp8, {**static_pt, "is_dynamic": None}]


def _two_part() -> list[dict]:
    nv = SYNTH["nvfp4"]
    w4a8 = [
        _tensor("fp8_e4m3", "per_tensor", None, None, None, "float"),
        _tensor("int4", "per_channel", None, None, None, "float"),
    ]
    out = [nv, {**nv, "weight": w4a8, "input_tensors": nv["input_tensors"][1]}]
    for i, field in itertools.product(range(2), ["group_size", "qscheme", "is_dynamic"]):
        w = [dict(t) for t in nv["weight"]]
        w[i][field] = {"group_size": 32, "qscheme": "per_channel", "is_dynamic": True}[field]
        out.append({**nv, "weight": w})
    out.append({**nv, "input_tensors": nv["input_tensors"][0]})
    out.append({**nv, "weight": nv["weight"][:1], "input_tensors": nv["input_tensors"][:1]})
    return out


def _grid() -> list[dict]:
    base = {"output_tensors": None, "bias": None}
    out = [{**base, "weight": w, "input_tensors": i} for w in _weights() for i in _inputs()]
    return out + [{**base, **s} for s in _two_part()] + list(SYNTH.values())


GRID = _grid()


def _answers(spec: dict) -> tuple[Scheme, Detection, Detection]:
    return (
        scheme_from_spec(QuarkLayerSpec.model_validate(spec), "grid"),
        detect_linear(spec),
        detect_moe(spec),
    )


@functools.cache
def _grid_answers() -> list[tuple[QuarkLayer, Scheme, Detection, Detection]]:
    return [(QuarkLayer.parse(spec), *_answers(spec)) for spec in GRID]


def test_the_grid_covers_every_format_on_both_sides():
    formats, families = set(), set()
    for layer, scheme, lin, moe in _grid_answers():
        formats.add(scheme.format)
        families |= {detect_family(lin, layer), detect_family(moe, layer)}
    # INT4 is compressed-tensors' pack-quantized storage; Quark's int4 specs stay unsupported
    assert formats >= set(F) - {F.UNQUANTIZED, F.INT4}
    assert families >= CODEC_FAMILIES | {"mxfp6", "w4a8", "w4a16_int4", None}


def test_where_both_answer_they_name_one_format():
    disagree, unsupported = [], []
    for layer, scheme, *dets in _grid_answers():
        for det in dets:
            fam = detect_family(det, layer)
            if fam is None:
                continue  # vLLM refuses: nothing to agree with
            if scheme.format is F.UNSUPPORTED:
                if fam in CODEC_FAMILIES:
                    unsupported.append((fam, layer.text()))
                continue
            if not agree(scheme, fam, layer):
                disagree.append((scheme.short(), fam, layer.text()))
    assert not unsupported, unsupported[:5]
    assert not disagree, disagree[:5]


# -- the real specs, pinned --------------------------------------------------------------------

PINNED = {
    "fp8_per_block": ("fp8_block[128,128]", "fp8_block", "fp8_block"),
    "fp8_per_channel": ("fp8_per_channel", "fp8", "fp8"),
    "fp8_per_tensor": ("fp8_per_tensor", "fp8", "fp8"),
    "mxfp4": ("mxfp4/32", "ocp_mx", "ocp_mx"),
    "nvfp4": ("nvfp4/16", "nvfp4", "nvfp4"),
}


@pytest.mark.parametrize("name", sorted(SYNTH))
def test_real_specs(name):
    scheme, lin, moe = _answers(SYNTH[name])
    assert (scheme.short(), lin.scheme, moe.scheme) == PINNED[name]


def test_known_differences_are_the_engines_own():
    """Where the readers differ on purpose (ckpt reads what the files hold, vLLM compares
    exact spellings), the difference is pinned here, so changing either side shows."""
    mx = {**SYNTH["mxfp4"], "input_tensors": None}
    upper = {**mx, "weight": {**mx["weight"], "scale_format": "E8M0"}}
    scheme, lin, moe = _answers(upper)
    assert (scheme.format, lin.scheme, moe.scheme) == (F.MXFP4, None, None)
    # scale_format e8m0 on an FP8 block: ckpt expects E8M0 scales, vLLM's key is float-scaled
    block = SYNTH["fp8_per_block"]
    e8m0 = {**block, "weight": {**block["weight"], "scale_format": "e8m0"}}
    scheme, lin, moe = _answers(e8m0)
    assert (scheme.scale_is_e8m0, lin.scheme, moe.scheme) == (True, "fp8_block", "fp8_block")
    # is_dynamic unset on a per-tensor FP8 input: vLLM reads it static, ckpt expects no scale
    pt = SYNTH["fp8_per_tensor"]
    unset = {**pt, "input_tensors": {**pt["input_tensors"], "is_dynamic": None}}
    scheme, lin, _ = _answers(unset)
    assert (scheme.input_scale_suffix, scheme.activation, lin.scheme) == (None, "dynamic", "fp8")


# -- one record, read by both ------------------------------------------------------------------

PERTURB = [
    ("mxfp4", "dtype", "int4"),
    ("mxfp4", "qscheme", "per_channel"),
    ("mxfp4", "group_size", 16),
    ("mxfp4", "scale_format", None),
    ("fp8_per_block", "block", (64, 64)),
    ("fp8_per_block", "scale_type", "float8_e8m0fnu"),
    ("fp8_per_tensor", "is_dynamic", True),
    ("fp8_per_channel", "qscheme", "per_block"),
    ("nvfp4", "group_size", 32),
]


def _view(spec: dict) -> tuple:
    scheme, lin, moe = _answers(spec)
    return scheme.model_dump(exclude={"spec"}), lin, moe


@pytest.mark.parametrize(("name", "field", "value"), PERTURB)
def test_a_field_read_differently_changes_both_answers(monkeypatch, name, field, value):
    """Both readers take the record from ``QuarkTensor.parse``: change what it reads for one
    field and both answers move (a reader with its own reading of the field would not)."""
    spec = SYNTH[name]
    before = _view(spec)
    parse = QuarkTensor.parse.__func__  # type: ignore[attr-defined]

    def perturbed(cls, raw):
        t = parse(cls, raw)
        return dataclasses.replace(t, **{field: value}) if getattr(t, field) is not None else t

    monkeypatch.setattr(QuarkTensor, "parse", classmethod(perturbed))
    after = _view(spec)
    assert after[0] != before[0], "ckpt's Scheme ignores the record's " + field
    assert after[1:] != before[1:], "vLLM's detection ignores the record's " + field


#: the Quark keys only quark_record may name
QUARK_KEYS = {
    "weight",
    "input_tensors",
    "output_tensors",
    "bias",
    "dtype",
    "qscheme",
    "group_size",
    "block_size",
    "scale_format",
    "scale_type",
    "is_dynamic",
    "symmetric",
    "ch_axis",
}


def _strings(fn) -> set[str]:
    """String constants in a function or module's code, docstrings left out."""
    tree = ast.parse(inspect.getsource(fn))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    }


READERS = [
    quark_detect,
    quark_spec.scheme_from_spec,
    quark_spec._two_part_scheme,
    quark_spec._single_weight_scheme,
    quark_spec._activation,
    quark_spec._unsupported,
    fse_gates.is_quark_mxfp4_ocp,
    fse_gates._plain_weight,
    fse_gates.dsv4_gate,
]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__)
def test_readers_name_no_quark_key(reader):
    assert not _strings(reader) & QUARK_KEYS
